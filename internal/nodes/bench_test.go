package nodes_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/nodeapi"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// BenchmarkPlacement places one-GPU allocations over 1,000 ready nodes of
// 16 GPUs each, durably (each placement is its own committed transaction
// with its audit row and event). Run with -benchtime=10000x for the
// 10,000-allocation figure; BenchmarkRawCommit beside it is the commit rate
// of the same store in the same run.
func BenchmarkPlacement(b *testing.B) {
	for _, d := range storetest.Dialects {
		b.Run(string(d), func(b *testing.B) {
			s := servertest.Start(b, d)
			ctx := context.Background()
			me := s.Admin().Do("GET", "/api/v1/me", nil).Want(b, 200).String("id")
			g, err := iam.LoadGrants(ctx, s.DB.Queries(), principal.Principal{Type: principal.User, ID: me})
			if err != nil {
				b.Fatal(err)
			}
			seedNodes(b, s.DB, 1000, 16)
			actx := principal.With(ctx, g.P)
			b.ResetTimer()
			for range b.N {
				if _, err := s.App.Nodes.CreateAllocation(actx, g, nodes.AllocationInput{ProjectID: s.Creds.ProjectID, SKU: "h100-80gb.1x"}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "placements/s")
		})
	}
}

// BenchmarkRawCommit is the baseline: one tiny audited transaction per op.
func BenchmarkRawCommit(b *testing.B) {
	for _, d := range storetest.Dialects {
		b.Run(string(d), func(b *testing.B) {
			db := storetest.Open(b, d)
			ctx := principal.With(context.Background(), principal.SystemActor)
			b.ResetTimer()
			for i := range b.N {
				if err := db.Mutate(ctx, func(tx *store.Tx) error {
					return tx.Audit(store.AuditEvent{Action: "bench", ResourceType: "bench", ResourceID: fmt.Sprint(i)}, nil, nil)
				}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}

func seedNodes(b *testing.B, db *store.DB, n, gpus int) {
	now := time.Now()
	err := db.InTx(context.Background(), func(q *store.Queries) error {
		for i := range n {
			name := fmt.Sprintf("sim-%04d", i)
			inv := inventory(name, gpus, "NVIDIA H100 80GB HBM3")
			nd := store.Node{ID: iam.NewID(), Name: name, State: nodes.StateReady, KeyID: iam.NewID(), PublicKey: "-", Inventory: []byte("{}"),
				InventoryDigest: nodes.InventoryDigest(inv), Workloads: []byte("[]"), GPUCount: gpus, FreeGPUs: gpus, GPUModel: inv.GPUs[0].Model,
				GPUVendor: "nvidia", GPUMemoryMiB: inv.GPUs[0].MemoryMiB, LastHeartbeatAt: now.Add(time.Hour), StateChangedAt: now, CreatedAt: now, UpdatedAt: now}
			if err := q.InsertNode(context.Background(), nd); err != nil {
				return err
			}
			gs := make([]store.NodeGPU, 0, gpus)
			for _, g := range inv.GPUs {
				gs = append(gs, store.NodeGPU{NodeID: nd.ID, UUID: g.UUID, Index: g.Index, Model: g.Model, Vendor: "nvidia", MemoryMiB: g.MemoryMiB})
			}
			if err := q.SetNodeInventory(context.Background(), nd, gs, now.Add(time.Hour)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = nodeapi.KindImagePull
}
