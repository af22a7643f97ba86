package instances_test

import (
	"context"
	"testing"

	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A launch is recorded under the entitlement as it is when it is recorded:
// an admin who disables or narrows the entitlement after the launch was
// checked, but before it was recorded, gets no instance beside it. The
// change commits while the launch's transaction is open (the launch gate
// runs in it, before the launch holds the entitlement), so only
// PostgreSQL, where the two overlap, can show it. The opposite order, the
// change waiting for a launch that holds the entitlement, is the store's
// TestRetiresWaitForASharedLaunch.
func TestLaunchUnderAnEntitlementChangedMeanwhile(t *testing.T) {
	f := newFixture(t, store.Postgres)
	off, on := false, true
	for _, c := range []struct {
		name        string
		change      catalog.EntitlementInput
		field, code string
	}{
		{"disabled", catalog.EntitlementInput{Enabled: &off}, "/app_slug", instances.CodeNotEntitled},
		{"narrowed to other versions", catalog.EntitlementInput{Enabled: &on,
			PolicyOverrides: &catalog.EntitlementOverrides{AllowedVersions: []string{"2.0.0"}}}, "/version", instances.CodeNotEntitled},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.svc.LaunchGate = &inTxGate{run: func() {
				if _, err := f.cat.PutEntitlement(f.ctx, f.g, f.project.ID, "echo", c.change); err != nil {
					t.Errorf("change the entitlement: %v", err)
				}
			}}
			_, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: c.name})
			if field, code := fieldCode(t, err); field != c.field || code != c.code {
				t.Fatalf("the launch: %s %s (%v), want %s %s", field, code, err, c.field, c.code)
			}
			if list, _, err := f.svc.List(f.ctx, f.g, f.project.ID, "", storage.Page{Limit: 10}); err != nil || len(list) != 0 {
				t.Fatalf("instances after the refused launch: %d (%v), want none", len(list), err)
			}
			f.svc.LaunchGate = nil
			if _, err := f.cat.PutEntitlement(f.ctx, f.g, f.project.ID, "echo", catalog.EntitlementInput{Enabled: &on,
				PolicyOverrides: &catalog.EntitlementOverrides{}}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// inTxGate is a launch gate that runs run once, inside the recording
// transaction (the gate's read-only call outside it does nothing).
type inTxGate struct {
	run  func()
	done bool
}

func (g *inTxGate) CheckInstance(_ context.Context, tx storage.Tx, _, _ string) error {
	if tx != nil && !g.done {
		g.done = true
		g.run()
	}
	return nil
}

// An upgrade or rollback is recorded under the entitlement as it is when
// it is recorded, as a launch is: an entitlement disabled, or narrowed
// away from the target version, after the request was resolved (the
// placement hook changes it there) refuses it, and the instance goes on
// running the version it ran, with no operation begun.
func TestVersionChangeUnderAnEntitlementChangedMeanwhile(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		off, on := false, true
		entitle := func(in catalog.EntitlementInput) {
			if _, err := f.cat.PutEntitlement(f.ctx, f.g, f.project.ID, "echo", in); err != nil {
				t.Errorf("change the entitlement: %v", err)
			}
		}
		inst := f.launchRunning(t, "1.0.0")
		_, _, err := f.svc.Upgrade(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: "2.0.0"})
		must(t, err)
		f.finish(t)
		for _, c := range []struct {
			name, version, field string
			change               catalog.EntitlementInput
			move                 func(context.Context, *iam.Grants, string, string, instances.VersionInput) (instances.AppInstance, instances.InstanceOperation, error)
		}{
			{"upgrade, entitlement disabled", "3.0.0", "/app_slug", catalog.EntitlementInput{Enabled: &off}, f.svc.Upgrade},
			{"upgrade, narrowed to other versions", "3.0.0", "/target_version", catalog.EntitlementInput{Enabled: &on,
				PolicyOverrides: &catalog.EntitlementOverrides{AllowedVersions: []string{"1.0.0", "2.0.0"}}}, f.svc.Upgrade},
			{"rollback, entitlement disabled", "1.0.0", "/app_slug", catalog.EntitlementInput{Enabled: &off}, f.svc.Rollback},
			{"rollback, narrowed to other versions", "1.0.0", "/target_version", catalog.EntitlementInput{Enabled: &on,
				PolicyOverrides: &catalog.EntitlementOverrides{AllowedVersions: []string{"2.0.0", "3.0.0"}}}, f.svc.Rollback},
		} {
			t.Run(c.name, func(t *testing.T) {
				before := len(f.eventTypes(t, inst.ID))
				f.allocs.placing = func() { entitle(c.change) }
				_, _, err := c.move(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: c.version})
				if field, code := fieldCode(t, err); field != c.field || code != instances.CodeNotEntitled {
					t.Fatalf("%s: %s %s (%v), want %s %s", c.name, field, code, err, c.field, instances.CodeNotEntitled)
				}
				if got := f.get(t, inst.ID); got.Status != instances.StatusRunning || got.Version != "2.0.0" {
					t.Fatalf("after the refusal: %s %s, want running 2.0.0", got.Status, got.Version)
				}
				if after := f.eventTypes(t, inst.ID); len(after) != before {
					t.Fatalf("events recorded by the refused request: %v", after[before:])
				}
				entitle(catalog.EntitlementInput{Enabled: &on, PolicyOverrides: &catalog.EntitlementOverrides{}})
			})
		}
	})
}
