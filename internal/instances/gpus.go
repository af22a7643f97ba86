package instances

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/manifest"
)

// GPUs of an allocation. An allocation is a set of GPUs on one node, and
// several of the project's instances, and added members of any of its
// instances, may run on it. Each gets GPUs of its own: an instance's are
// chosen in the transaction that records its launch (and again in each
// deployment, which keeps them unless its gpu_count changed), under the
// node's placement lock, so two launches never take the same GPU. Before,
// every instance took the first gpu_count GPUs of its allocation: two
// instances on an allocation of eight ran on one GPU while seven idled.

// gpuCheck says whether resolve counts the GPUs still free on an
// allocation. A launch and a version change do, so a request that cannot
// get its GPUs is answered at once (the instance's own GPUs, except's,
// count as free for a change). A deployment does not (its claim decides),
// nor do members, which choose their own (freeGPUs).
type gpuCheck struct {
	on     bool
	except string
}

// gpuShortage is the refusal of a claim the allocation's free GPUs cannot
// meet.
type gpuShortage struct {
	allocationID  string
	want, free, n int
}

func (e *gpuShortage) Error() string {
	return fmt.Sprintf("gpu_count %d does not fit allocation %s now: other app instances and members on it hold %d of its %d GPUs, %d free; decommission one of them, launch onto another allocation (target_allocation_id), or ask for fewer GPUs",
		e.want, e.allocationID, e.n-e.free, e.n, e.free)
}

// gpusHeld maps each GPU of allocation a that a live instance other than
// except, or a live added member of any instance, holds to its holder.
func gpusHeld(ctx context.Context, q Queries, a Allocation, except string) (map[string]string, error) {
	insts, err := q.LiveInstancesOn(ctx, a.ID, "")
	if err != nil {
		return nil, err
	}
	held := map[string]string{}
	for _, inst := range insts {
		if inst.ID == except {
			continue
		}
		for _, u := range instanceGPUs(inst, a) {
			held[u] = inst.ID
		}
	}
	ms, err := q.AddedMembersOn(ctx, a.ID, "")
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		for _, u := range m.GPUUUIDs {
			held[u] = m.InstanceID
		}
	}
	return held, nil
}

// instanceGPUs is what inst holds of a: the GPUs it was given or, for an
// instance deployed before they were recorded, the first gpu_count GPUs of
// its allocation, where it runs.
func instanceGPUs(inst AppInstance, a Allocation) []string {
	if len(inst.GPUUUIDs) > 0 || inst.DeploySeq == 0 || inst.TargetAllocationID != a.ID {
		return inst.GPUUUIDs
	}
	var doc LaunchDoc
	if json.Unmarshal(inst.Effective, &doc) != nil {
		return nil
	}
	return a.GPUUUIDs[:min(max(doc.Effective.Resources.GPUCount, 0), len(a.GPUUUIDs))]
}

// pickGPUs chooses n GPUs of a that nobody in held has, the ones in keep
// first (a redeployment stays on the GPUs it ran on), then in the
// allocation's order. ok is false when fewer than n are free.
func pickGPUs(a Allocation, held map[string]string, keep []string, n int) (gpus []string, ok bool) {
	if n <= 0 {
		return nil, true
	}
	free := func(u string) bool { return held[u] == "" && contains(a.GPUUUIDs, u) && !contains(gpus, u) }
	for _, list := range [][]string{keep, a.GPUUUIDs} {
		for _, u := range list {
			if len(gpus) < n && free(u) {
				gpus = append(gpus, u)
			}
		}
	}
	return gpus, len(gpus) == n
}

// freeGPUCount is how many GPUs of a nobody but except holds.
func freeGPUCount(ctx context.Context, q Queries, a Allocation, except string) (int, error) {
	held, err := gpusHeld(ctx, q, a, except)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, u := range a.GPUUUIDs {
		if held[u] == "" {
			n++
		}
	}
	return n, nil
}

// claimGPUs gives inst n GPUs of a in tx, holding the node's placement
// lock until tx ends: the ones it has if they still are n of a, else free
// ones. A *gpuShortage when too few are free.
func claimGPUs(ctx context.Context, tx Tx, inst *AppInstance, a Allocation, n int) error {
	if err := tx.LockPlacement(ctx, a.NodeID); err != nil {
		return err
	}
	held, err := gpusHeld(ctx, tx, a, inst.ID)
	if err != nil {
		return err
	}
	gpus, ok := pickGPUs(a, held, instanceGPUs(*inst, a), n)
	if !ok {
		return &gpuShortage{allocationID: a.ID, want: n, free: len(gpus), n: len(a.GPUUUIDs)}
	}
	inst.GPUUUIDs = gpus
	return nil
}

// gpuRefusal answers a launch whose GPUs were taken between its resolve
// and its record as the resolve would have: a field error on gpu_count.
func gpuRefusal(err error) error {
	var sh *gpuShortage
	if errors.As(err, &sh) {
		return errdefs.Validation([]errdefs.FieldError{{Field: "/resources/gpu_count", Code: CodeGPUsInUse, Message: sh.Error()}})
	}
	return err
}

// fits is Compatible and, when gpus asks, the allocation's free GPUs: the
// problems that keep a launch of mv with eff off allocation a.
func fits(ctx context.Context, q Queries, mv manifest.Version, eff catalog.Effective, a Allocation, gpus gpuCheck) ([]errdefs.FieldError, error) {
	if fes := Compatible(mv, eff, a); fes != nil || !gpus.on || eff.Resources.GPUCount == 0 {
		return fes, nil
	}
	free, err := freeGPUCount(ctx, q, a, gpus.except)
	if err != nil || free >= eff.Resources.GPUCount {
		return nil, err
	}
	sh := &gpuShortage{allocationID: a.ID, want: eff.Resources.GPUCount, free: free, n: len(a.GPUUUIDs)}
	return []errdefs.FieldError{{Field: "/resources/gpu_count", Code: CodeGPUsInUse, Message: sh.Error()}}, nil
}
