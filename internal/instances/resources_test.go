package instances

import (
	"fmt"
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/catalog"
)

// A workload without an explicit CPU or memory size gets its GPUs' share
// of the node (a workload of no GPUs: its allocation's), so one tenant's
// container cannot take a shared node whole, nor one instance the share of
// the others on its allocation.
func TestWorkloadResourcesShareOfNode(t *testing.T) {
	node := func(gpus, cores int, mib int64) nodeapi.Inventory {
		inv := nodeapi.Inventory{CPUCores: cores, MemoryMiB: mib}
		for i := range gpus {
			inv.GPUs = append(inv.GPUs, nodeapi.GPU{UUID: fmt.Sprintf("GPU-%d", i)})
		}
		return inv
	}
	holding := func(n int, shape string, inv nodeapi.Inventory) Allocation {
		a := Allocation{Shape: shape, Inventory: inv}
		for i := range n {
			a.GPUUUIDs = append(a.GPUUUIDs, fmt.Sprintf("GPU-%d", i))
		}
		return a
	}
	gpus := func(n int) catalog.EffectiveResources { return catalog.EffectiveResources{GPUCount: n} }
	for _, c := range []struct {
		name     string
		eff      catalog.EffectiveResources
		a        Allocation
		cpu, mem int
	}{
		{"half the GPUs: half the node", gpus(4), holding(4, "gpu_slice", node(8, 64, 512<<10)), 32, 256},
		{"a quarter", gpus(2), holding(2, "gpu_slice", node(8, 64, 512<<10)), 16, 128},
		{"one GPU of an allocation of four: its own share, an eighth", gpus(1), holding(4, "gpu_slice", node(8, 64, 512<<10)), 8, 64},
		{"no GPUs: the allocation's share", gpus(0), holding(2, "gpu_slice", node(8, 64, 512<<10)), 16, 128},
		{"cores round down", gpus(1), holding(1, "gpu_slice", node(8, 30, 512<<10)), 3, 64},
		{"memory rounds down to whole GiB", gpus(2), holding(2, "gpu_slice", node(8, 32, 250000)), 8, 61},
		{"at least 1 core and 1 GiB", gpus(1), holding(1, "gpu_slice", node(8, 4, 4096)), 1, 1},
		{"explicit sizes win", catalog.EffectiveResources{CPUCores: 40, MemoryGiB: 3}, holding(2, "gpu_slice", node(8, 64, 512<<10)), 40, 3},
		{"an explicit CPU size leaves memory to the share", catalog.EffectiveResources{CPUCores: 2}, holding(2, "gpu_slice", node(8, 64, 512<<10)), 2, 128},
		{"an explicit memory size leaves CPU to the share", catalog.EffectiveResources{MemoryGiB: 7}, holding(2, "gpu_slice", node(8, 64, 512<<10)), 16, 7},
		{"no GPUs reported: unlimited", gpus(1), holding(2, "gpu_slice", node(0, 64, 512<<10)), 0, 0},
		{"no cores reported: CPU unlimited", gpus(2), holding(2, "gpu_slice", node(8, 0, 512<<10)), 0, 128},
		{"no memory reported: memory unlimited", gpus(2), holding(2, "gpu_slice", node(8, 64, 0)), 16, 0},
		{"every GPU of the node: the whole node, unlimited", gpus(1), holding(8, "gpu_slice", node(8, 64, 512<<10)), 0, 0},
		{"none of the node's GPUs: unlimited", gpus(0), holding(0, "gpu_slice", node(8, 64, 512<<10)), 0, 0},
		{"baremetal: the whole node, unlimited", gpus(1), holding(2, "baremetal", node(8, 64, 512<<10)), 0, 0},
	} {
		got := workloadResources(c.eff, c.a)
		if got.CPUCores != c.cpu || got.MemoryGiB != c.mem || got.GPUCount != c.eff.GPUCount || got.HostPort != c.eff.HostPort {
			t.Errorf("%s: got %+v, want cpu_cores %d memory_gib %d", c.name, got, c.cpu, c.mem)
		}
	}
}
