package agent

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/driver/drivertest"
)

// manualClock is a clock a test moves by hand.
type manualClock struct{ t time.Time }

func (c *manualClock) Now() time.Time { return c.t }

// An image pulled for a run stays while the run has not come, however long
// the pruner's passes go on (the fake prunes every unheld unused image, as
// if its grace had passed), across an agent restart too; the run then
// creates its container. Once a container uses it, and then the instance
// is removed, the image is pruned.
func TestImagePulledForARunOutlivesThePruneGrace(t *testing.T) {
	ctx := context.Background()
	clk := &manualClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := &drivertest.Fake{Images: true}
	dir := t.TempDir()
	cfg := func(c *Config) { c.DataDir, c.Now = dir, clk.Now }
	a := newFakeAgent(t, f, cfg)
	img := nodeapi.ImagePull{Repository: "registry.test/app", Digest: pinned}
	ref := img.Repository + "@" + img.Digest
	if res := a.execute(ctx, task(t, "pull-1", nodeapi.KindImagePull, "inst-1", img)); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("pull: %+v", res)
	}
	// The control plane is away for hours; the pruner runs on.
	for range 3 {
		clk.t = clk.t.Add(2 * time.Hour)
		if err := a.reconcileOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The agent restarts meanwhile: the hold was written down.
	a.Stop()
	f2 := &drivertest.Fake{Images: true}
	f2.Pull(ctx, img) // the engine kept the image over the restart
	a = newFakeAgent(t, f2, cfg)
	clk.t = clk.t.Add(2 * time.Hour)
	if err := a.reconcileOnce(ctx); err != nil {
		t.Fatal(err)
	}
	run := task(t, "run-1", nodeapi.KindContainerRun, "inst-1", nodeapi.ContainerRun{Name: "app", Image: img})
	if res := a.execute(ctx, run); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("run after the gap: %s %s (the image pulled for it was pruned before it came)", res.ReasonCode, res.Message)
	}
	// The container uses it now: kept by use, not by the hold.
	if err := a.reconcileOnce(ctx); err != nil || !f2.HasImage(ref) {
		t.Fatalf("an image a container uses was pruned (%v)", err)
	}
	if a.holds.Held(ref) {
		t.Fatalf("the hold outlived the run that created its container")
	}
	rm := task(t, "rm-1", nodeapi.KindContainerRemove, "inst-1", nodeapi.ContainerRef{})
	if res := a.execute(ctx, rm); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("remove: %+v", res)
	}
	if err := a.reconcileOnce(ctx); err != nil || f2.HasImage(ref) {
		t.Fatalf("the image of a removed instance was kept (%v)", err)
	}
}

// A hold is bounded: a pulled image whose run never comes is pruned once
// the longest hold passed, and a run that failed keeps its hold until its
// instance is removed.
func TestImageHoldEnds(t *testing.T) {
	ctx := context.Background()
	clk := &manualClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := &drivertest.Fake{Images: true}
	a := newFakeAgent(t, f, func(c *Config) { c.Now, c.ImageHoldMax = clk.Now, 3*time.Hour })
	old := nodeapi.ImagePull{Repository: "registry.test/app", Digest: pinned}
	if res := a.execute(ctx, task(t, "pull-1", nodeapi.KindImagePull, "inst-1", old)); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("pull: %+v", res)
	}
	clk.t = clk.t.Add(2 * time.Hour)
	if err := a.reconcileOnce(ctx); err != nil || !f.HasImage(old.Repository+"@"+old.Digest) {
		t.Fatalf("pruned within the longest hold (%v)", err)
	}
	clk.t = clk.t.Add(time.Hour)
	if err := a.reconcileOnce(ctx); err != nil || f.HasImage(old.Repository+"@"+old.Digest) {
		t.Fatalf("a pulled image whose run never came was kept past the longest hold (%v)", err)
	}

	// A run that fails keeps its image held; removing the instance ends it.
	img := nodeapi.ImagePull{Repository: "registry.test/app", Digest: running}
	if res := a.execute(ctx, task(t, "pull-2", nodeapi.KindImagePull, "inst-2", img)); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("pull: %+v", res)
	}
	f.Errs = map[string]error{"Run": io.ErrUnexpectedEOF}
	if res := a.execute(ctx, task(t, "run-2", nodeapi.KindContainerRun, "inst-2", nodeapi.ContainerRun{Name: "app", Image: img})); res.State != nodeapi.ResultFailed {
		t.Fatalf("run: %+v", res)
	}
	if err := a.reconcileOnce(ctx); err != nil || !f.HasImage(img.Repository+"@"+img.Digest) {
		t.Fatalf("the image of a failed run was pruned before its retry (%v)", err)
	}
	if res := a.execute(ctx, task(t, "rm-2", nodeapi.KindContainerRemove, "inst-2", nodeapi.ContainerRef{})); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("remove: %+v", res)
	}
	if err := a.reconcileOnce(ctx); err != nil || f.HasImage(img.Repository+"@"+img.Digest) {
		t.Fatalf("the image of a removed instance stayed held (%v)", err)
	}
}

// An unreadable record of holds is replaced, with a warning naming it.
func TestDamagedHoldRecordIsReplaced(t *testing.T) {
	var logs strings.Builder
	dir := t.TempDir()
	h := &holds{path: dir + "/" + holdsFile, max: time.Hour, now: time.Now, log: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := writeFileAtomic(h.path, []byte(`[{"ref":"a`)); err != nil {
		t.Fatal(err)
	}
	if h.Held("a") || !strings.Contains(logs.String(), holdsFile) {
		t.Fatalf("damaged record: held %v, log %q", h.Held("a"), logs.String())
	}
	h.Hold("inst", "b")
	h2 := &holds{path: h.path, max: time.Hour, now: time.Now, log: slog.New(slog.DiscardHandler)}
	if !h2.Held("b") {
		t.Fatal("a hold written after a damaged record was lost on reload")
	}
}
