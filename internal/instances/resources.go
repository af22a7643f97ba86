package instances

import (
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/nodes"
)

// workloadResources returns the resources a workload on allocation a is
// rendered with: the effective ones, with a CPU or memory size they leave
// open (0: the runtime profile declares no bounds and the launch asked
// none) set to the workload's share of its node, node size × its GPUs /
// the node's GPUs — cores rounded down, memory rounded down to whole GiB,
// each at least 1. Its GPUs are its gpu_count: every workload on an
// allocation has GPUs of its own (gpus.go), so the shares of the
// allocation's GPU workloads add up to the allocation's share of the node
// at most. A workload of no GPUs on the allocation gets the allocation's
// share.
//
// Why: a gpu_slice node carries several tenants' allocations, and a
// container without a CPU or memory limit may take every core and all the
// memory of the node, starving or OOM-killing the other tenants'
// workloads. Every place that builds a runtime.Deployment (the deploy,
// the trial render, an added member's) takes its resources from here, so
// what a launch is checked against is what the node runs.
//
// An explicit size always wins, even above the share (Compatible holds it
// to the node). A dimension whose inventory the node did not report (no
// GPUs, no cores, no memory) stays open, as does a whole node's (a
// baremetal allocation, or one holding every GPU of the node): there is
// no other tenant to protect, and a limit at the node's size gains nothing
// while it can hurt (memory rounded down to whole GiB falls short of the
// node's; a stale inventory could put --cpus above the host's cores, which
// Docker refuses), so it renders as before, unlimited.
//
// An allocation of none of the node's GPUs has no share to scale: it stays
// open too, as before, rather than squeezed to one core and one GiB (an
// admin who carves such an allocation out of a GPU node sizes it).
//
// Only the rendered deployment carries the share: the launch document and
// the effective values the API answers keep what the launch resolved to.
func workloadResources(eff catalog.EffectiveResources, a Allocation) catalog.EffectiveResources {
	nodeGPUs, held := int64(len(a.Inventory.GPUs)), int64(len(a.GPUUUIDs))
	if nodeGPUs == 0 || held == 0 || held >= nodeGPUs || a.Shape == nodes.ShapeBaremetal {
		return eff
	}
	if own := int64(eff.GPUCount); own > 0 {
		held = min(own, held)
	}
	if cores := int64(a.Inventory.CPUCores); eff.CPUCores == 0 && cores > 0 {
		eff.CPUCores = int(max(cores*held/nodeGPUs, 1))
	}
	if mib := a.Inventory.MemoryMiB; eff.MemoryGiB == 0 && mib > 0 {
		eff.MemoryGiB = int(max(mib*held/nodeGPUs/1024, 1))
	}
	return eff
}
