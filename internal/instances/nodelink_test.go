package instances_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A project's allocations span more than one page of the store's list:
// ProjectAllocations reads them all, so a launch can be placed on a live
// allocation past the first page (here most of them are released, and
// every live one but the first is past it).
func TestProjectAllocationsReadsEveryPage(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		db := storetest.Open(t, d)
		ctx := context.Background()
		now := time.Now().UTC()
		q := db.Queries()
		org, p, other := mkTenant(t, q)

		ns := store.Nodes(db)
		mkNode := func(name string, state nodes.NodeState) nodes.Node {
			inv, err := json.Marshal(nodeapi.Inventory{Address: name + ".example", CPUCores: 32})
			must(t, err)
			n := nodes.Node{ID: iam.NewID(), Name: name, State: state, KeyID: iam.NewID(), PublicKey: "pk-" + name,
				Inventory: inv, Workloads: []byte(`[]`), TokensValidAfter: now, LastHeartbeatAt: now, StateChangedAt: now, CreatedAt: now, UpdatedAt: now}
			must(t, ns.Read().InsertNode(ctx, n))
			return n
		}
		nodeList := []nodes.Node{mkNode("gpu-a", nodes.StateReady), mkNode("gpu-b", nodes.StateDraining)}

		// The project's allocation ids in list order, two full pages and
		// some; another project's allocations are interleaved with them.
		total := 2*storage.MaxPageLimit + 10
		var ids, otherIDs []string
		all := make([]string, total+total/9+1)
		for i := range all {
			all[i] = iam.NewID()
		}
		slices.Sort(all)
		for i, id := range all {
			if i%10 == 9 || len(ids) == total {
				otherIDs = append(otherIDs, id)
			} else {
				ids = append(ids, id)
			}
		}
		if len(ids) != total {
			t.Fatalf("setup: %d ids, want %d", len(ids), total)
		}
		live := map[int]nodes.AllocationState{
			3:                          nodes.AllocActive,
			storage.MaxPageLimit:       nodes.AllocActive, // first of page two
			storage.MaxPageLimit + 77:  nodes.AllocPending,
			2*storage.MaxPageLimit - 1: nodes.AllocReleasing, // last of page two
			2*storage.MaxPageLimit + 9: nodes.AllocLost,      // last of page three
		}
		var want []instances.Allocation
		var wantIdx []int
		must(t, ns.InTx(ctx, func(q nodes.Queries) error {
			insert := func(id string, project iam.Project, n nodes.Node, state nodes.AllocationState) error {
				return q.InsertAllocation(ctx, nodes.Allocation{ID: id, OrgID: org.ID, ProjectID: project.ID, NodeID: n.ID, Shape: "gpu_slice", SKU: "h100.x",
					State: state, CreatedBy: "user:1", CreatedAt: now, UpdatedAt: now})
			}
			for i, id := range otherIDs {
				if err := insert(id, other, nodeList[i%len(nodeList)], nodes.AllocActive); err != nil {
					return err
				}
			}
			for i, id := range ids {
				n := nodeList[i%len(nodeList)]
				state, ok := live[i]
				if !ok {
					state = nodes.AllocReleased
				}
				if err := insert(id, p, n, state); err != nil {
					return err
				}
				if ok {
					wantIdx = append(wantIdx, i)
					want = append(want, instances.Allocation{ID: id, OrgID: org.ID, ProjectID: p.ID, NodeID: n.ID, Shape: "gpu_slice",
						State: state, GPUUUIDs: []string{}, NodeState: n.State, Inventory: nodeapi.Inventory{Address: n.Name + ".example", CPUCores: 32}})
				}
			}
			return nil
		}))

		link := instances.NodesLink{Nodes: nodes.New(nodes.Deps{Store: ns})}
		check := func(what string, got []instances.Allocation) {
			t.Helper()
			if len(got) != len(want) {
				var gotIdx []int
				for _, a := range got {
					gotIdx = append(gotIdx, slices.Index(ids, a.ID))
				}
				t.Fatalf("%s: %d allocations at list positions %v, want %d at %v", what, len(got), gotIdx, len(want), wantIdx)
			}
			for i := range want {
				g, w := got[i], want[i]
				if g.ID != w.ID || g.ProjectID != w.ProjectID || g.NodeID != w.NodeID || g.State != w.State || g.NodeState != w.NodeState ||
					g.Inventory.Address != w.Inventory.Address || g.Inventory.CPUCores != w.Inventory.CPUCores || len(g.GPUUUIDs) != 0 {
					t.Fatalf("%s: allocation %d = %+v, want %+v", what, i, g, w)
				}
			}
		}

		got, err := link.ProjectAllocations(ctx, nil, p.ID)
		must(t, err)
		check("outside a transaction", got)

		// Inside a transaction the pages are read in it.
		errRollback := errors.New("rollback")
		err = ns.Mutate(ctx, func(tx nodes.Tx) error {
			got, err := link.ProjectAllocations(ctx, tx, p.ID)
			must(t, err)
			check("in a transaction", got)
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatalf("mutate: %v", err)
		}

		none, err := link.ProjectAllocations(ctx, nil, iam.NewID())
		must(t, err)
		if len(none) != 0 {
			t.Fatalf("unknown project: %d allocations", len(none))
		}
	})
}
