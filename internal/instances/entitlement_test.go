package instances_test

import (
	"context"
	"testing"

	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
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
