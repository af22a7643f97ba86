package instances_test

import (
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A version cannot be retired under an instance on its way to it: a
// launch, upgrade or rollback to it still in progress counts as a live
// instance of it, as the instance will run it once the operation ends.
func TestRetireCountsInstancesOnTheirWay(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		inst := f.launchRunning(t, "1.0.0")
		_, _, err := f.svc.Upgrade(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: "2.0.0"})
		must(t, err)
		f.transition(t, "2.0.0", "deprecate")
		if err := f.retire("2.0.0"); codeOf(err) != "version_in_use" {
			t.Fatalf("retiring the version an upgrade is on its way to: %v, want version_in_use", err)
		}

		// A launch still in progress, too.
		_, _, err = f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "3.0.0", DisplayName: "second"})
		must(t, err)
		f.transition(t, "3.0.0", "deprecate")
		if err := f.retire("3.0.0"); codeOf(err) != "version_in_use" {
			t.Fatalf("retiring the version a launch is on its way to: %v, want version_in_use", err)
		}
	})
}

// A launch, upgrade or rollback resolves its version before the
// transaction that records it; a retirement that commits in between must
// not be crossed. The placement hook retires the version at that point.
func TestVersionRetiredWhileARequestRunsRefusesIt(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		retireDuringPlacement := func(version string) {
			f.allocs.placing = func() {
				if version != "1.0.0" {
					f.transition(t, version, "deprecate")
				}
				must(t, f.retire(version))
			}
		}

		inst := f.launchRunning(t, "1.0.0")
		_, _, err := f.svc.Upgrade(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: "2.0.0"})
		must(t, err)
		f.finish(t)

		// A rollback may go back to a deprecated version, not a retired one.
		f.transition(t, "1.0.0", "deprecate")
		retireDuringPlacement("1.0.0")
		_, _, err = f.svc.Rollback(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: "1.0.0"})
		f.refusedAndStill(t, "rollback", err, inst.ID, "2.0.0")

		retireDuringPlacement("3.0.0")
		_, _, err = f.svc.Upgrade(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: "3.0.0"})
		f.refusedAndStill(t, "upgrade", err, inst.ID, "2.0.0")

		f.register(t, "4.0.0", digestV4)
		retireDuringPlacement("4.0.0")
		_, _, err = f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "4.0.0", DisplayName: "late"})
		if field, code := fieldCode(t, err); field != "/version" || code != instances.CodeVersionNotLaunchable {
			t.Fatalf("launch of a version retired meanwhile: %s %s (%v)", field, code, err)
		}
		if n, err := f.db.Queries().CountLiveInstancesOfVersion(f.ctx, "echo", "4.0.0"); err != nil || n != 0 {
			t.Fatalf("instances of the retired version: %d %v", n, err)
		}
	})
}

// An artifact is pinned by resolve, before the transaction that records
// its digest (the launch's, then the deployment's); a retirement or
// revocation that commits in between must not be crossed: the artifact's
// retire counted no instance running the digest.
func TestArtifactRetiredWhileALaunchRunsRefusesIt(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		f.allocs.placing = func() { retireArtifacts(t, f, "2.0.0") }
		_, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "2.0.0", DisplayName: "late"})
		if field, code := fieldCode(t, err); field != "/version" || code != instances.CodeArtifactNotReady {
			t.Fatalf("launch of an artifact retired meanwhile: %s %s (%v)", field, code, err)
		}
		if n, err := f.db.Queries().CountLiveInstancesUsingDigest(f.ctx, "echo", digestV2); err != nil || n != 0 {
			t.Fatalf("instances running the retired digest: %d %v", n, err)
		}

		// The deployment re-pins; an artifact revoked between its pin and
		// its record is not deployed, and the launch fails with the reason.
		inst, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "3.0.0", DisplayName: "revoked"})
		must(t, err)
		f.allocs.placing = func() { revoke(t, f, "3.0.0") }
		_ = f.svc.Drive(f.ctx, "test-driver") // the step that crossed the revocation fails
		f.drive(t)
		for _, task := range f.q.pending() {
			if task.kind == nodeapi.KindContainerRun {
				t.Fatalf("a revoked artifact was deployed (task %s)", task.id)
			}
		}
		if got := f.get(t, inst.ID); got.Status != instances.StatusFailed {
			t.Fatalf("launch of an artifact revoked before its deployment: %s", got.Status)
		}
	})
}

// retireArtifacts moves the artifacts of echo@version to retired, as
// their retire would once deprecated.
func retireArtifacts(t *testing.T, f *fixture, version string) {
	t.Helper()
	changeArtifacts(t, f, version, func(a *artifacts.AppArtifact) { a.LifecycleState = artifacts.StateRetired })
}

// refusedAndStill checks that a version change (what) to a version
// retired meanwhile was refused, and instance id still runs version.
func (f *fixture) refusedAndStill(t *testing.T, what string, err error, id, version string) {
	t.Helper()
	if field, code := fieldCode(t, err); field != "/target_version" || code != instances.CodeVersionNotLaunchable {
		t.Fatalf("%s to a version retired meanwhile: %s %s (%v)", what, field, code, err)
	}
	if got := f.get(t, id); got.Status != instances.StatusRunning || got.Version != version {
		t.Fatalf("after the refused %s: %s %s, want running %s", what, got.Status, got.Version, version)
	}
}

const digestV4 = "sha256:4444444444444444444444444444444444444444444444444444444444444444"

// codeOf is the code of an errdefs error, "" for any other.
func codeOf(err error) string {
	if e, ok := errdefs.As(err); ok {
		return e.Code
	}
	return ""
}

// launchRunning launches echo@version and drives it to running.
func (f *fixture) launchRunning(t *testing.T, version string) instances.AppInstance {
	t.Helper()
	inst, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: version, DisplayName: "echo " + version})
	must(t, err)
	f.finish(t)
	if got := f.get(t, inst.ID); got.Status != instances.StatusRunning {
		t.Fatalf("launch of %s: %s", version, got.Status)
	}
	return inst
}

// finish lets the node carry out every task queued so far, and the
// driver take the operations through.
func (f *fixture) finish(t *testing.T) {
	t.Helper()
	for range 3 {
		f.drive(t)
		f.q.complete(t, nodeapi.TaskResult{})
	}
	f.drive(t)
}

func (f *fixture) transition(t *testing.T, version, action string) {
	t.Helper()
	_, err := f.cat.TransitionVersion(f.ctx, f.g, "echo", version, action, "test")
	must(t, err)
}

func (f *fixture) retire(version string) error {
	_, err := f.cat.TransitionVersion(f.ctx, f.g, "echo", version, "retire", "test")
	return err
}
