package agent

import (
	"context"
	"fmt"
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
// the longest hold passed.
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
}

// An upgrade whose new version's run fails reverts to the old version: the
// failed run ends its hold on the new image, so the pruner removes it,
// while the old image, which the reverted container uses, stays. (The
// control plane queues no image.pull for an upgrade: its run pulls the new
// image. A pull's hold outlives a failed run: TestFailedRunLeavesAPullsHold.)
func TestFailedUpgradeRunEndsItsHold(t *testing.T) {
	ctx := context.Background()
	f := &drivertest.Fake{Images: true}
	a := newFakeAgent(t, f)
	v1 := nodeapi.ImagePull{Repository: "registry.test/app", Digest: pinned}
	v2 := nodeapi.ImagePull{Repository: "registry.test/app", Digest: running}
	ok := func(tk nodeapi.Task) {
		t.Helper()
		if res := a.execute(ctx, tk); res.State != nodeapi.ResultSucceeded {
			t.Fatalf("%s: %+v", tk.ID, res)
		}
	}
	ok(task(t, "pull-1", nodeapi.KindImagePull, "inst-1", v1))
	ok(task(t, "run-1", nodeapi.KindContainerRun, "inst-1", nodeapi.ContainerRun{Name: "app-1", Image: v1}))
	// The upgrade: the old workload goes, and the new version's run pulls
	// its image, then fails.
	ok(task(t, "rm-1", nodeapi.KindContainerRemove, "inst-1", nodeapi.ContainerRef{Name: "app-1"}))
	f.Pull(ctx, v2)
	f.Errs = map[string]error{"Run": io.ErrUnexpectedEOF}
	if res := a.execute(ctx, task(t, "run-2", nodeapi.KindContainerRun, "inst-1", nodeapi.ContainerRun{Name: "app-2", Image: v2})); res.State != nodeapi.ResultFailed {
		t.Fatalf("run of the new version: %+v", res)
	}
	f.Errs = nil
	// The revert: the old version runs again.
	ok(task(t, "rm-2", nodeapi.KindContainerRemove, "inst-1", nodeapi.ContainerRef{Name: "app-2"}))
	ok(task(t, "run-3", nodeapi.KindContainerRun, "inst-1", nodeapi.ContainerRun{Name: "app-3", Image: v1}))
	if err := a.reconcileOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if f.HasImage(v2.Repository + "@" + v2.Digest) {
		t.Fatal("the image of a failed upgrade run stayed held after the instance reverted")
	}
	if !f.HasImage(v1.Repository + "@" + v1.Digest) {
		t.Fatal("the image the reverted instance runs was pruned")
	}
}

// A pull's hold lives by its own rule: it waits for a run of the instance
// to create its container from the image, so a run that fails (a retry may
// come) leaves it; the run that succeeds ends it.
func TestFailedRunLeavesAPullsHold(t *testing.T) {
	ctx := context.Background()
	f := &drivertest.Fake{Images: true}
	a := newFakeAgent(t, f)
	img := nodeapi.ImagePull{Repository: "registry.test/app", Digest: pinned}
	ref := img.Repository + "@" + img.Digest
	if res := a.execute(ctx, task(t, "pull-1", nodeapi.KindImagePull, "inst-1", img)); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("pull: %+v", res)
	}
	f.Errs = map[string]error{"Run": io.ErrUnexpectedEOF}
	if res := a.execute(ctx, task(t, "run-1", nodeapi.KindContainerRun, "inst-1", nodeapi.ContainerRun{Name: "app", Image: img})); res.State != nodeapi.ResultFailed {
		t.Fatalf("failing run: %+v", res)
	}
	f.Errs = nil
	if err := a.reconcileOnce(ctx); err != nil || !f.HasImage(ref) {
		t.Fatalf("a failed run ended the hold an image.pull took for the instance's next run: the image was pruned before the retry (%v)", err)
	}
	if res := a.execute(ctx, task(t, "run-2", nodeapi.KindContainerRun, "inst-1", nodeapi.ContainerRun{Name: "app", Image: img})); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("retried run: %s %s", res.ReasonCode, res.Message)
	}
	if a.holds.Held(ref) {
		t.Fatal("the pull's hold outlived the run that created its container from the image")
	}
	if res := a.execute(ctx, task(t, "rm-1", nodeapi.KindContainerRemove, "inst-1", nodeapi.ContainerRef{})); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("remove: %+v", res)
	}
	if err := a.reconcileOnce(ctx); err != nil || f.HasImage(ref) {
		t.Fatalf("the image of a removed instance was kept (%v)", err)
	}
}

// A failed image.pull ends its own hold and no other: an earlier pull of
// the same image for the same instance still holds it.
func TestFailedPullEndsOnlyItsOwnHold(t *testing.T) {
	ctx := context.Background()
	f := &drivertest.Fake{Images: true}
	a := newFakeAgent(t, f)
	img := nodeapi.ImagePull{Repository: "registry.test/app", Digest: pinned}
	ref := img.Repository + "@" + img.Digest
	if res := a.execute(ctx, task(t, "pull-1", nodeapi.KindImagePull, "inst-1", img)); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("pull: %+v", res)
	}
	f.Errs = map[string]error{"Pull": io.ErrUnexpectedEOF}
	if res := a.execute(ctx, task(t, "pull-2", nodeapi.KindImagePull, "inst-1", img)); res.State != nodeapi.ResultFailed {
		t.Fatalf("failing pull: %+v", res)
	}
	f.Errs = nil
	if err := a.reconcileOnce(ctx); err != nil || !f.HasImage(ref) {
		t.Fatalf("a failed image.pull ended an earlier pull's hold on the image: it was pruned (%v)", err)
	}
}

// A compose.up holds every image its project's services use, those its
// task does not list too: a pruner pass while Up pulls, right after Up
// found an unlisted image on the engine (an earlier instance's, idle and
// unheld), leaves it, and the project comes up. The run's end ends that
// hold like the others.
func TestComposeUpHoldsTheImagesItDoesNotList(t *testing.T) {
	ctx := context.Background()
	listed := nodeapi.ImagePull{Repository: "registry.test/app", Digest: pinned}
	side := nodeapi.ImagePull{Repository: "registry.test/sidecar", Digest: running}
	sideRef := side.Repository + "@" + side.Digest
	f := &drivertest.Fake{Images: true, Unlisted: []nodeapi.ImagePull{side}}
	a := newFakeAgent(t, f)
	f.Pull(ctx, listed)
	f.Pull(ctx, side)
	pruned := false
	f.AfterPull = func(ref string) {
		if ref == sideRef && !pruned {
			pruned = true
			if err := a.reconcileOnce(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	up := task(t, "up-1", nodeapi.KindComposeUp, "inst-1", nodeapi.ComposeUp{Project: "proj-1", Images: []nodeapi.ImagePull{listed}})
	if res := a.execute(ctx, up); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("compose.up: %s %s (the pruner removed an image a service names but the task does not list, between Up finding it and creating its container)", res.ReasonCode, res.Message)
	}
	if !pruned {
		t.Fatal("the hook never ran: no pruner pass came during Up")
	}
	if a.holds.Held(sideRef) {
		t.Fatal("the run's hold on its unlisted image outlived the run")
	}
	if res := a.execute(ctx, task(t, "down-1", nodeapi.KindComposeDown, "inst-1", nodeapi.ComposeDown{Project: "proj-1"})); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("compose.down: %+v", res)
	}
	if err := a.reconcileOnce(ctx); err != nil || f.HasImage(sideRef) {
		t.Fatalf("the unlisted image of a project brought down was kept (%v)", err)
	}
}

// A run the agent's stop interrupts keeps its holds (its task comes back);
// removing its workload (compose.down of its project, container.remove of
// its container) ends them, while a pull's hold for the instance's next run
// stays.
func TestWorkloadTeardownEndsTheHoldsOfItsRuns(t *testing.T) {
	for _, c := range []struct {
		name     string
		run, rm  func(nodeapi.ImagePull) (string, any)
		teardown string
	}{
		{"compose", func(ip nodeapi.ImagePull) (string, any) {
			return nodeapi.KindComposeUp, nodeapi.ComposeUp{Project: "proj-1", Images: []nodeapi.ImagePull{ip}}
		}, func(nodeapi.ImagePull) (string, any) {
			return nodeapi.KindComposeDown, nodeapi.ComposeDown{Project: "proj-1"}
		}, "compose.down"},
		{"container", func(ip nodeapi.ImagePull) (string, any) {
			return nodeapi.KindContainerRun, nodeapi.ContainerRun{Name: "app-1", Image: ip}
		}, func(nodeapi.ImagePull) (string, any) {
			return nodeapi.KindContainerRemove, nodeapi.ContainerRef{Name: "app-1"}
		}, "container.remove"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &drivertest.Fake{Images: true}
			a := newFakeAgent(t, f)
			img := nodeapi.ImagePull{Repository: "registry.test/app", Digest: pinned}
			next := nodeapi.ImagePull{Repository: "registry.test/app", Digest: running}
			ref, nextRef := img.Repository+"@"+img.Digest, next.Repository+"@"+next.Digest
			f.Pull(context.Background(), img)
			kind, payload := c.run(img)
			cutShort(t, a, f, task(t, "run-1", kind, "inst-1", payload))
			ctx := context.Background()
			if err := a.reconcileOnce(ctx); err != nil || !f.HasImage(ref) {
				t.Fatalf("the image of an interrupted run was pruned before its task came back (%v)", err)
			}
			// The control plane gives up on the run and tears its workload
			// down, with the next version pulled meanwhile.
			if res := a.execute(ctx, task(t, "pull-2", nodeapi.KindImagePull, "inst-1", next)); res.State != nodeapi.ResultSucceeded {
				t.Fatalf("pull: %+v", res)
			}
			kind, payload = c.rm(img)
			if res := a.execute(ctx, task(t, "down-1", kind, "inst-1", payload)); res.State != nodeapi.ResultSucceeded {
				t.Fatalf("%s: %+v", c.teardown, res)
			}
			if err := a.reconcileOnce(ctx); err != nil || f.HasImage(ref) {
				t.Fatalf("the image of a run whose workload %s removed stayed held (%v)", c.teardown, err)
			}
			if !f.HasImage(nextRef) {
				t.Fatalf("%s ended a pull's hold for the instance's next run", c.teardown)
			}
		})
	}
}

// A pull for a run and a pruner pass interleave at the two points where
// the pull finding the image and the pruner removing it could cross:
//   - the pruner decides the image is unused and unheld, then the pull
//     finds it on the engine and takes its hold, then the pruner would
//     remove it: the pruner looks at the holds again, with hold-taking shut
//     out, right before the removal;
//   - the pull finds the image, then a whole pruner pass runs, then the
//     pull would take its hold: the pull takes it before it looks.
//
// Either way the image stays and the run creates its container.
func TestPrunerCannotRaceAHold(t *testing.T) {
	for _, pruneOutside := range []bool{true, false} {
		name := map[bool]string{true: "pull between the prune decision and the removal", false: "prune pass during the pull"}[pruneOutside]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			f := &drivertest.Fake{Images: true}
			a := newFakeAgent(t, f)
			img := nodeapi.ImagePull{Repository: "registry.test/app", Digest: pinned}
			f.Pull(ctx, img) // unused and unheld: a decommissioned instance's
			inner := 0
			pull := func() {
				if res := a.execute(ctx, task(t, "pull-1", nodeapi.KindImagePull, "inst-2", img)); res.State != nodeapi.ResultSucceeded {
					t.Errorf("pull: %+v", res)
				}
			}
			prune := func() {
				if err := a.reconcileOnce(ctx); err != nil {
					t.Error(err)
				}
			}
			outer, between := pull, prune
			if pruneOutside {
				outer, between = prune, pull
			}
			once := func(string) {
				if inner++; inner == 1 {
					between()
				}
			}
			if pruneOutside {
				f.BeforePrune = once
			} else {
				f.AfterPull = once
			}
			if outer(); inner == 0 {
				t.Fatal("the hook never ran: nothing interleaved")
			}
			run := task(t, "run-1", nodeapi.KindContainerRun, "inst-2", nodeapi.ContainerRun{Name: "app", Image: img})
			if res := a.execute(ctx, run); res.State != nodeapi.ResultSucceeded {
				t.Fatalf("run: %s %s (the pruner removed the image the pull found and held)", res.ReasonCode, res.Message)
			}
		})
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
	h.Hold(holder{InstanceID: "inst", Task: "pull-1", Kind: nodeapi.KindImagePull}, "b")
	h2 := &holds{path: h.path, max: time.Hour, now: time.Now, log: slog.New(slog.DiscardHandler)}
	if !h2.Held("b") {
		t.Fatal("a hold written after a damaged record was lost on reload")
	}
}

// A run cut short by the agent stopping keeps its hold, since its task is
// delivered again; but when the control plane gives its workload a run
// under a new task id (a retried step, a revert, a later operation), the
// first run is not coming back: its hold ends when that run ends, whether
// it created the workload or failed, not only at teardown or after the
// longest hold.
func TestRunThatReplacesItsWorkloadEndsACutShortRunsHold(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(nodeapi.ImagePull) (string, any)
	}{
		{"compose", func(ip nodeapi.ImagePull) (string, any) {
			return nodeapi.KindComposeUp, nodeapi.ComposeUp{Project: "proj-1", Images: []nodeapi.ImagePull{ip}}
		}},
		{"container", func(ip nodeapi.ImagePull) (string, any) {
			return nodeapi.KindContainerRun, nodeapi.ContainerRun{Name: "app-1", Image: ip}
		}},
	} {
		for _, fails := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fails=%v", c.name, fails), func(t *testing.T) {
				f := &drivertest.Fake{Images: true}
				a := newFakeAgent(t, f)
				old := nodeapi.ImagePull{Repository: "registry.test/app", Digest: pinned}
				next := nodeapi.ImagePull{Repository: "registry.test/app", Digest: running}
				oldRef, nextRef := old.Repository+"@"+old.Digest, next.Repository+"@"+next.Digest
				f.Pull(context.Background(), old)
				f.Pull(context.Background(), next)
				kind, payload := c.run(old)
				cutShort(t, a, f, task(t, "run-1", kind, "inst-1", payload))
				ctx := context.Background()
				// The same workload is run by another task, from another image.
				want := nodeapi.ResultSucceeded
				if fails {
					f.Errs = map[string]error{"Run": io.ErrUnexpectedEOF, "Up": io.ErrUnexpectedEOF}
					want = nodeapi.ResultFailed
				}
				kind, payload = c.run(next)
				if res := a.execute(ctx, task(t, "run-2", kind, "inst-1", payload)); res.State != want {
					t.Fatalf("run-2: %+v, want %s", res, want)
				}
				f.Errs = nil
				if err := a.reconcileOnce(ctx); err != nil || f.HasImage(oldRef) {
					t.Fatalf("the image of run-1, cut short, stayed held after run-2 ran its workload (%v)", err)
				}
				if !fails && !f.HasImage(nextRef) {
					t.Fatal("the image run-2's workload uses was pruned")
				}
			})
		}
	}
}

// cutShort executes run task rt as an agent that stops mid-run: its driver
// call ends canceled, and the run keeps its holds for its task's return.
func cutShort(t *testing.T, a *Agent, f *drivertest.Fake, rt nodeapi.Task) {
	t.Helper()
	stopped, stop := context.WithCancel(context.Background())
	stop()
	f.Errs = map[string]error{"Run": context.Canceled, "Up": context.Canceled}
	a.execute(stopped, rt)
	f.Errs = nil
}

// A held-images.json an older agent wrote names no task and no kind: a hold
// without a workload reads as an image.pull's, one with a workload as that
// workload's run's (docs/nodes.md), and each ends by that kind's rule.
func TestOldHoldRecordReadsAsDocumented(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	rec := `[{"ref":"reg/app@run","instance_id":"inst-1","workload":"app-1","since":"` + now.Format(time.RFC3339Nano) + `"},` +
		`{"ref":"reg/app@pull","instance_id":"inst-1","since":"` + now.Format(time.RFC3339Nano) + `"}]`
	if err := writeFileAtomic(dir+"/"+holdsFile, []byte(rec)); err != nil {
		t.Fatal(err)
	}
	h := &holds{path: dir + "/" + holdsFile, max: time.Hour, now: time.Now, log: slog.New(slog.DiscardHandler)}
	held := func(want map[string]bool, after string) {
		t.Helper()
		for ref, w := range want {
			if h.Held(ref) != w {
				t.Fatalf("after %s: %s held %v, want %v", after, ref, !w, w)
			}
		}
	}
	held(map[string]bool{"reg/app@run": true, "reg/app@pull": true}, "loading the old record")

	// No task took the old pull's hold, so no failed pull ends it.
	h.Drop(holder{InstanceID: "inst-1", Task: "pull-9", Kind: nodeapi.KindImagePull})
	// A run of another workload, or of another instance, that fails ends neither.
	h.EndRun(holder{InstanceID: "inst-1", Task: "run-7", Kind: nodeapi.KindContainerRun, Workload: "app-2"}, false, "reg/app@pull")
	h.EndRun(holder{InstanceID: "inst-2", Task: "run-7", Kind: nodeapi.KindContainerRun, Workload: "app-1"}, true, "reg/app@pull")
	held(map[string]bool{"reg/app@run": true, "reg/app@pull": true}, "a failed pull, another workload's failed run, another instance's run")

	// A run of app-1 ends the old run hold, failed or not: it was that workload's run's.
	h.EndRun(holder{InstanceID: "inst-1", Task: "run-8", Kind: nodeapi.KindContainerRun, Workload: "app-1"}, false, "reg/app@other")
	held(map[string]bool{"reg/app@run": false, "reg/app@pull": true}, "a failed run of app-1")

	// A run of the instance that created its containers from the pulled image ends the pull's.
	h.EndRun(holder{InstanceID: "inst-1", Task: "run-9", Kind: nodeapi.KindContainerRun, Workload: "app-2"}, true, "reg/app@pull")
	held(map[string]bool{"reg/app@pull": false}, "a run that created its containers from the pulled image")
}
