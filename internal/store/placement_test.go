package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// On PostgreSQL the claim and the GPU read are one statement, whose
// snapshot predates the row lock it may wait for. A placement that waited
// for another placement on the same node must still see that placement's
// GPU holds: here B waits on A's lock, A holds GPU 0 and commits, and B
// must be given GPU 1 — reading with its stale snapshot it would pick GPU 0
// too, and fail on the primary key.
func TestClaimAfterLockWaitSeesTheHolderHolds(t *testing.T) {
	db := storetest.Open(t, store.Postgres)
	ctx := context.Background()
	q := db.Queries()
	o := mkOrg(t, db, "claim")
	p := iam.Project{ID: newID(), OrgID: o.ID, Slug: "claim", Name: "claim", CreatedAt: time.Now()}
	if err := q.CreateProject(ctx, p); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	n := nodes.Node{ID: newID(), Name: "n1", State: "ready", KeyID: newID(), PublicKey: "-", Inventory: []byte("{}"), Workloads: []byte("[]"),
		GPUCount: 2, FreeGPUs: 2, GPUModel: "H100", GPUVendor: "nvidia", GPUMemoryMiB: 81559,
		LastHeartbeatAt: now, StateChangedAt: now, CreatedAt: now, UpdatedAt: now}
	if err := q.InsertNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	gpus := []nodes.NodeGPU{{NodeID: n.ID, UUID: "GPU-0", Index: 0, Model: "H100", Vendor: "nvidia", MemoryMiB: 81559},
		{NodeID: n.ID, UUID: "GPU-1", Index: 1, Model: "H100", Vendor: "nvidia", MemoryMiB: 81559}}
	if err := q.SetNodeInventory(ctx, n, gpus, now); err != nil {
		t.Fatal(err)
	}
	one := nodes.PlacementQuery{GPUs: 1}
	place := func(q *store.Queries, skipLocked bool) (nodes.Claim, error) {
		cl, err := q.ClaimPlacement(ctx, one, "", time.Now(), skipLocked)
		if err != nil {
			return cl, err
		}
		if len(cl.Free) != 1 {
			return cl, errors.New("claim read no free GPU")
		}
		return cl, q.InsertAllocation(ctx, nodes.Allocation{ID: newID(), OrgID: o.ID, ProjectID: p.ID, NodeID: cl.NodeID, Shape: "gpu_slice",
			SKU: "h100.1x", GPUCount: 1, GPUUUIDs: cl.Free, State: "pending", CreatedBy: "test", CreatedAt: now, UpdatedAt: now})
	}

	claimedA, releaseA := make(chan nodes.Claim, 1), make(chan struct{})
	doneA := make(chan error, 1)
	go func() {
		doneA <- db.InTx(ctx, func(q *store.Queries) error {
			cl, err := place(q, true)
			claimedA <- cl
			if err != nil {
				return err
			}
			<-releaseA
			return nil
		})
	}()
	a := <-claimedA
	var b nodes.Claim
	doneB := make(chan error, 1)
	go func() {
		doneB <- db.InTx(ctx, func(q *store.Queries) error {
			var err error
			b, err = place(q, false) // waits for A's row lock
			return err
		})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := store.LockWaitersForTest(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B never waited on A's lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(releaseA)
	if err := <-doneA; err != nil {
		t.Fatalf("A: %v", err)
	}
	if err := <-doneB; err != nil {
		t.Fatalf("B, after waiting for A: %v", err)
	}
	if a.Free[0] != "GPU-0" || b.Free[0] != "GPU-1" {
		t.Fatalf("A got %v and B got %v; want GPU-0 and GPU-1", a.Free, b.Free)
	}
}
