package instances_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A launch whose profile declares no CPU or memory bounds, and which asks
// none, runs limited to its GPU's share of the node: 1 of the node's 8
// GPUs (on an allocation of 2), an eighth of its cores and of its memory
// (whole GiB); a member added on that allocation too.
func TestLaunchWithoutSizesGetsItsGPUsShareOfNode(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		const cores, mib = 30, int64(250000)
		inv := nodeapi.Inventory{CPUCores: cores, MemoryMiB: mib, Address: "gpu-7.example"}
		for i := range 8 {
			inv.GPUs = append(inv.GPUs, nodeapi.GPU{UUID: fmt.Sprintf("GPU-%d", i), Model: "NVIDIA H100 80GB HBM3", Vendor: "nvidia"})
		}
		f.allocs.list[0].GPUUUIDs = []string{"GPU-0", "GPU-1"}
		f.allocs.list[0].Inventory = inv
		f.registerSizeless(t)
		inst, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "sizeless", Version: "1.0.0", DisplayName: "s"})
		must(t, err)
		f.drive(t)
		tasks := f.q.pending()
		if len(tasks) != 1 || tasks[0].kind != nodeapi.KindContainerRun {
			t.Fatalf("tasks: %+v", tasks)
		}
		run := tasks[0].payload.(nodeapi.ContainerRun)
		wantCPU, wantMiB := float64(cores/8), mib/8/1024*1024 // 3 cores, 30 GiB
		if run.CPUCores != wantCPU || run.MemoryMiB != wantMiB {
			t.Fatalf("container.run limits: cpu_cores %v memory_mib %d, want %v and %d", run.CPUCores, run.MemoryMiB, wantCPU, wantMiB)
		}
		// The launch's effective values stay as resolved: no size asked.
		var doc instances.LaunchDoc
		must(t, json.Unmarshal(f.get(t, inst.ID).Effective, &doc))
		if r := doc.Effective.Resources; r.CPUCores != 0 || r.MemoryGiB != 0 {
			t.Fatalf("effective resources changed: %+v", r)
		}
		// A member added on the allocation is held to the same share.
		f.q.complete(t, nodeapi.TaskResult{})
		f.drive(t)
		_, _, _, err = f.svc.AddMembers(f.ctx, f.g, f.project.ID, inst.ID, instances.MembersInput{Role: "worker", AllocationID: f.allocID, Count: 1})
		must(t, err)
		f.drive(t)
		tasks = f.q.pending()
		if len(tasks) != 1 || tasks[0].kind != nodeapi.KindContainerRun {
			t.Fatalf("member tasks: %+v", tasks)
		}
		run = tasks[0].payload.(nodeapi.ContainerRun)
		if run.Env["GPUAAS_MEMBER_ROLE"] != "worker" || run.CPUCores != wantCPU || run.MemoryMiB != wantMiB {
			t.Fatalf("member container.run: role %q cpu_cores %v memory_mib %d, want %v and %d", run.Env["GPUAAS_MEMBER_ROLE"], run.CPUCores, run.MemoryMiB, wantCPU, wantMiB)
		}
	})
}

// registerSizeless publishes sizeless 1.0.0, whose profile declares GPUs
// but no CPU or memory bounds (and worker members), and entitles the
// project to it.
func (f *fixture) registerSizeless(t *testing.T) {
	t.Helper()
	f.registerOCI(t, "sizeless", "1.0.0", digestV1, `{gpu_count: {default: 1, min: 1, max: 4}}`, "    members: {roles: [worker], max_count: 4}\n")
	enabled := true
	_, err := f.cat.PutEntitlement(f.ctx, f.g, f.project.ID, "sizeless", catalog.EntitlementInput{Enabled: &enabled})
	must(t, err)
}
