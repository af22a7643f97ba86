package nodes_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/iam"
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
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/concurrency=%d", d, par), func(b *testing.B) { benchPlacement(b, d, par) })
		}
	}
}

// benchPlacement places b.N allocations from par goroutines at once (the
// API serves requests concurrently; SQLite still commits one at a time).
func benchPlacement(b *testing.B, d store.Dialect, par int) {
	s := servertest.Start(b, d)
	ctx := context.Background()
	me := s.Admin().Do("GET", "/api/v1/me", nil).Want(b, 200).String("id")
	g, err := iam.LoadGrants(ctx, s.DB.Queries(), principal.Principal{Type: principal.User, ID: me})
	if err != nil {
		b.Fatal(err)
	}
	seedNodes(b, s.DB, 1000, 16)
	actx := principal.With(ctx, g.P)
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if _, err := s.App.Nodes.CreateAllocation(actx, g, nodes.AllocationInput{ProjectID: s.Creds.ProjectID, SKU: "h100-80gb.1x"}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "placements/s")
}

// BenchmarkRawCommit is the baseline: one tiny audited transaction per op,
// at the same concurrencies as BenchmarkPlacement.
func BenchmarkRawCommit(b *testing.B) {
	for _, d := range storetest.Dialects {
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/concurrency=%d", d, par), func(b *testing.B) {
				db := storetest.Open(b, d)
				ctx := principal.With(context.Background(), principal.SystemActor)
				var left atomic.Int64
				left.Store(int64(b.N))
				var wg sync.WaitGroup
				b.ResetTimer()
				for range par {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := left.Add(-1); i >= 0; i = left.Add(-1) {
							if err := db.Mutate(ctx, func(tx *store.Tx) error {
								return tx.Audit(store.AuditEvent{Action: "bench", ResourceType: "bench", ResourceID: fmt.Sprint(i)}, nil, nil)
							}); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
			})
		}
	}
}

// BenchmarkHeartbeat is one node heartbeat through the real HTTP API (node
// token check, unchanged workloads: the common case), beating from many
// goroutines at once. It reports the process CPU per beat and, from it, the
// CPU-seconds per wall-second that 1,000 agents cost at the default TTL
// (one beat every TTL/3 = 3.33 s each: 300 beats/s). The client runs in the
// same process, so the figure is an upper bound for the server alone.
func BenchmarkHeartbeat(b *testing.B) {
	storetest.EachDialect(b, func(b *testing.B, d store.Dialect) {
		s := servertest.Start(b, d)
		ids := seedNodes(b, s.DB, 1000, 8)
		clients := make([]*servertest.Client, len(ids))
		for i, id := range ids {
			tok, err := s.App.Tokens.Issue(principal.Principal{Type: principal.Node, ID: id}, "")
			if err != nil {
				b.Fatal(err)
			}
			clients[i] = s.As(tok.AccessToken)
		}
		wl := []nodeapi.Workload{{ContainerID: "c1", Name: "w1", State: "running"}, {ContainerID: "c2", Name: "w2", State: "running"}}
		for i, c := range clients { // first beat stores the workloads
			c.Do("POST", "/api/v1/nodes/"+ids[i]+"/heartbeat", nodeapi.Heartbeat{Workloads: wl}).Want(b, 200)
		}
		var next atomic.Int64
		cpu0 := cpuTime()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := int(next.Add(1)) % len(ids)
				if r := clients[i].Do("POST", "/api/v1/nodes/"+ids[i]+"/heartbeat", nodeapi.Heartbeat{Workloads: wl}); r.Status != 200 {
					b.Errorf("beat: %d %s", r.Status, r.Body)
				}
			}
		})
		b.StopTimer()
		perBeat := (cpuTime() - cpu0).Seconds() / float64(b.N)
		b.ReportMetric(perBeat*1e6, "cpu-µs/beat")
		b.ReportMetric(perBeat*1000/(nodes.DefaultHeartbeatTTL.Seconds()/3), "cpu-s/s@1000agents")
	})
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func seedNodes(b *testing.B, db *store.DB, n, gpus int) []string {
	now := time.Now()
	var ids []string
	err := db.InTx(context.Background(), func(q *store.Queries) error {
		for i := range n {
			name := fmt.Sprintf("sim-%04d", i)
			inv := inventory(name, gpus, "NVIDIA H100 80GB HBM3")
			nd := nodes.Node{ID: iam.NewID(), Name: name, State: nodes.StateReady, KeyID: iam.NewID(), PublicKey: "-", Inventory: []byte("{}"),
				InventoryDigest: nodes.InventoryDigest(inv), Workloads: []byte("[]"), GPUCount: gpus, FreeGPUs: gpus, GPUModel: inv.GPUs[0].Model,
				GPUVendor: "nvidia", GPUMemoryMiB: inv.GPUs[0].MemoryMiB, LastHeartbeatAt: now.Add(time.Hour), StateChangedAt: now, CreatedAt: now, UpdatedAt: now}
			if err := q.InsertNode(context.Background(), nd); err != nil {
				return err
			}
			ids = append(ids, nd.ID)
			gs := make([]nodes.NodeGPU, 0, gpus)
			for _, g := range inv.GPUs {
				gs = append(gs, nodes.NodeGPU{NodeID: nd.ID, UUID: g.UUID, Index: g.Index, Model: g.Model, Vendor: "nvidia", MemoryMiB: g.MemoryMiB})
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
	return ids
}
