package instances_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// Instances on one allocation run on GPUs of their own: each launch gets
// GPUs no other live instance there holds, in the record and in the task
// the node runs; a launch the free GPUs cannot meet is refused at the
// request (and in its preview); a decommission gives them back; a
// redeployment keeps them.
func TestInstancesOnOneAllocationGetGPUsOfTheirOwn(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		f.allocs.list[0].GPUUUIDs = []string{"GPU-a", "GPU-b", "GPU-c"}
		a := f.launchRunning(t, "1.0.0")
		two := 2
		b, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: "b",
			Resources: catalog.ResourceRequest{GPUCount: &two}})
		must(t, err)
		f.finish(t)
		f.wantGPUs(t, a.ID, "GPU-a")
		f.wantGPUs(t, b.ID, "GPU-b", "GPU-c")

		// Full: refused at the request, with the count free.
		in := instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: "c"}
		_, _, err = f.svc.Create(f.ctx, f.g, f.project.ID, in)
		if field, code := fieldCode(t, err); field != "/target_allocation_id" || code != instances.CodeNoAllocation || !strings.Contains(fieldMessage(err), "0 free") {
			t.Fatalf("a launch onto a full allocation: %s %s (%v)", field, code, err)
		}
		in.TargetAllocationID = f.allocID
		_, _, err = f.svc.Create(f.ctx, f.g, f.project.ID, in)
		if field, code := fieldCode(t, err); field != "/resources/gpu_count" || code != instances.CodeGPUsInUse {
			t.Fatalf("a launch onto a full allocation it names: %s %s (%v)", field, code, err)
		}
		if err := f.svc.LaunchRefusal(f.ctx, f.g, f.project.ID, "echo", "1.0.0", catalog.LaunchRequest{}); err == nil {
			t.Fatal("the preview passes a launch create refuses")
		}
		targets, err := f.svc.Targets(f.ctx, f.project.ID, "echo", "1.0.0", catalog.Effective{Resources: catalog.EffectiveResources{GPUCount: 1}})
		must(t, err)
		if len(targets) != 1 || targets[0].Compatible || len(targets[0].Problems) != 1 || targets[0].Problems[0].Code != instances.CodeGPUsInUse {
			t.Fatalf("the preview's targets show the full allocation as %+v", targets)
		}

		// A decommission gives its GPU back.
		_, _, err = f.svc.Decommission(f.ctx, f.g, f.project.ID, a.ID)
		must(t, err)
		f.finish(t)
		if got := f.get(t, a.ID).Status; got != instances.StatusDecommissioned {
			t.Fatalf("decommission: %s", got)
		}
		c := f.launchRunning(t, "1.0.0")
		f.wantGPUs(t, c.ID, "GPU-a")

		// An upgrade redeploys onto the same GPUs.
		_, _, err = f.svc.Upgrade(f.ctx, f.g, f.project.ID, b.ID, instances.VersionInput{TargetVersion: "2.0.0"})
		must(t, err)
		f.finish(t)
		if got := f.get(t, b.ID); got.Status != instances.StatusRunning || got.Version != "2.0.0" {
			t.Fatalf("upgrade: %s %s", got.Status, got.Version)
		}
		f.wantGPUs(t, b.ID, "GPU-b", "GPU-c")
	})
}

// A launch that names no allocation goes to one with its GPUs free, past
// a compatible one whose GPUs are all held.
func TestPlacementSkipsAFullAllocation(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		f.allocs.list[0].GPUUUIDs = []string{"GPU-a"}
		spare := f.allocs.list[0]
		spare.ID, spare.NodeID, spare.GPUUUIDs = "alloc-spare", "node-3", []string{"GPU-h"}
		f.allocs.list = append(f.allocs.list, spare)
		first := f.launchRunning(t, "1.0.0")
		second := f.launchRunning(t, "1.0.0")
		if got := f.get(t, first.ID).TargetAllocationID; got != f.allocID {
			t.Fatalf("first launch on %s", got)
		}
		if got := f.get(t, second.ID); got.TargetAllocationID != spare.ID || !slices.Equal(got.GPUUUIDs, []string{"GPU-h"}) {
			t.Fatalf("second launch on %s %v, want %s [GPU-h]", got.TargetAllocationID, got.GPUUUIDs, spare.ID)
		}
	})
}

// A member's GPUs are none that another instance on its allocation holds,
// nor that instance's own members'.
func TestMembersTakeNoOtherInstancesGPUs(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		f.allocs.list[0].GPUUUIDs = []string{"GPU-a", "GPU-b", "GPU-c", "GPU-d"}
		f.registerSizeless(t)
		launch := func(name string) instances.AppInstance {
			inst, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "sizeless", Version: "1.0.0", DisplayName: name})
			must(t, err)
			f.finish(t)
			return inst
		}
		one, two := launch("one"), launch("two")
		f.wantGPUs(t, one.ID, "GPU-a")
		f.wantGPUs(t, two.ID, "GPU-b")
		_, _, added, err := f.svc.AddMembers(f.ctx, f.g, f.project.ID, two.ID, instances.MembersInput{Role: "worker", Count: 1})
		must(t, err)
		_, _, more, err := f.svc.AddMembers(f.ctx, f.g, f.project.ID, one.ID, instances.MembersInput{Role: "worker", Count: 2})
		if err == nil {
			t.Fatalf("two members on one free GPU were added: %+v", more)
		}
		f.finish(t)
		if !slices.Equal(added[0].GPUUUIDs, []string{"GPU-c"}) {
			t.Fatalf("member of two: %v, want [GPU-c]", added[0].GPUUUIDs)
		}
		_, _, more, err = f.svc.AddMembers(f.ctx, f.g, f.project.ID, one.ID, instances.MembersInput{Role: "worker", Count: 1})
		must(t, err)
		if !slices.Equal(more[0].GPUUUIDs, []string{"GPU-d"}) {
			t.Fatalf("member of one: %v, want [GPU-d]", more[0].GPUUUIDs)
		}
		// And a launch finds the allocation full.
		if _, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "sizeless", Version: "1.0.0", DisplayName: "three",
			TargetAllocationID: f.allocID}); err == nil {
			t.Fatal("a launch onto GPUs members hold was accepted")
		}
	})
}

// Two launches that both found the one free GPU free reach their
// recording transactions together (the launch gate holds each until both
// are in): the one recorded second finds the GPU taken and is refused,
// rather than both running on it. PostgreSQL only: SQLite runs one
// mutation at a time. Which one reads the other's record depends on the
// scheduler without the node's placement lock; that the lock makes the
// second wait is TestPlacementsOnANodeWaitForEachOther's (store).
func TestLaunchesRacingForOneGPU(t *testing.T) {
	f := newFixture(t, store.Postgres)
	f.allocs.list[0].GPUUUIDs = []string{"GPU-a"}
	gate := &meetingGate{arrived: make(chan struct{}, 2), all: make(chan struct{})}
	f.svc.LaunchGate = gate
	var wg sync.WaitGroup
	errs := make([]error, 2)
	ids := make([]string, 2)
	for i := range 2 {
		wg.Go(func() {
			inst, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: "racer"})
			ids[i], errs[i] = inst.ID, err
		})
	}
	wg.Wait()
	if !gate.met {
		t.Fatal("the two launches never were in their transactions together")
	}
	won := slices.IndexFunc(errs, func(err error) bool { return err == nil })
	if won < 0 || errs[1-won] == nil {
		t.Fatalf("launches racing for one GPU: %v", errs)
	}
	if field, code := fieldCode(t, errs[1-won]); field != "/resources/gpu_count" || code != instances.CodeGPUsInUse {
		t.Fatalf("the launch recorded second: %s %s (%v)", field, code, errs[1-won])
	}
	if got := f.get(t, ids[won]).GPUUUIDs; !slices.Equal(got, []string{"GPU-a"}) {
		t.Fatalf("the winner holds %v", got)
	}
}

// meetingGate is a launch gate that, inside the recording transaction,
// holds each launch until two are there (or 5 s passed).
type meetingGate struct {
	arrived chan struct{}
	all     chan struct{}
	once    sync.Once
	met     bool
}

func (g *meetingGate) CheckInstance(_ context.Context, tx storage.Tx, _, _ string) error {
	if tx == nil {
		return nil
	}
	g.arrived <- struct{}{}
	if len(g.arrived) == cap(g.arrived) {
		g.once.Do(func() { g.met = true; close(g.all) })
	}
	select {
	case <-g.all:
	case <-time.After(5 * time.Second):
	}
	return nil
}

// An instance deployed before GPUs were recorded holds the first gpu_count
// of its allocation, where it runs: a launch beside it does not get them,
// and its own next deployment records them.
func TestInstancesFromBeforeHoldTheirFirstGPUs(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		f.allocs.list[0].GPUUUIDs = []string{"GPU-a", "GPU-b"}
		old := f.launchRunning(t, "1.0.0")
		rec := f.get(t, old.ID)
		rec.GPUUUIDs = nil
		must(t, f.db.Queries().UpdateAppInstance(f.ctx, rec, rec.Status)) // as the row reads after migration 0030
		if got := f.get(t, old.ID).GPUUUIDs; got != nil {
			t.Fatalf("the old row still records %v", got)
		}
		beside := f.launchRunning(t, "1.0.0")
		f.wantGPUs(t, beside.ID, "GPU-b")
		_, _, err := f.svc.Upgrade(f.ctx, f.g, f.project.ID, old.ID, instances.VersionInput{TargetVersion: "2.0.0"})
		must(t, err)
		f.finish(t)
		f.wantGPUs(t, old.ID, "GPU-a")
	})
}

// wantGPUs checks the GPUs instance id records and those its latest run
// task gives the workload.
func (f *fixture) wantGPUs(t *testing.T, id string, want ...string) {
	t.Helper()
	if got := f.get(t, id).GPUUUIDs; !slices.Equal(got, want) {
		t.Fatalf("instance %s records GPUs %v, want %v", id, got, want)
	}
	f.q.mu.Lock()
	defer f.q.mu.Unlock()
	for i := len(f.q.tasks) - 1; i >= 0; i-- {
		task := f.q.tasks[i]
		if run, ok := task.payload.(nodeapi.ContainerRun); ok && task.instance == id && run.Env["GPUAAS_MEMBER_ROLE"] == "" {
			if !slices.Equal(run.GPUUUIDs, want) {
				t.Fatalf("instance %s runs on GPUs %v, want %v", id, run.GPUUUIDs, want)
			}
			return
		}
	}
	t.Fatalf("instance %s has no run task", id)
}

// A member add chooses its GPUs before its transaction; the transaction
// refuses a GPU another launch took in between, and passes free ones.
func TestMemberGPUsTakenMeanwhileAreRefused(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		f.allocs.list[0].GPUUUIDs = []string{"GPU-a", "GPU-b"}
		f.launchRunning(t, "1.0.0") // takes GPU-a
		a := f.allocs.list[0]
		hold := func(gpu string) error {
			done := errors.New("checked")
			err := store.Instances(f.db).Mutate(f.ctx, func(tx instances.Tx) error {
				if err := instances.HoldMemberGPUsForTest(f.ctx, tx, []instances.InstanceMember{{GPUUUIDs: []string{gpu}}}, a); err != nil {
					return err
				}
				return done
			})
			if errors.Is(err, done) {
				return nil
			}
			return err
		}
		if err := hold("GPU-a"); codeOf(err) != "validation_failed" || !strings.Contains(fieldMessage(err), "GPU-a") {
			t.Fatalf("a member given the GPU a launch took meanwhile: %v", err)
		}
		must(t, hold("GPU-b"))
	})
}
