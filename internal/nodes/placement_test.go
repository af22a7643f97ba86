package nodes_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// 100 concurrent requests for one GPU each against 6 GPUs on 3 nodes: six
// succeed with six different GPUs, the rest are refused with
// insufficient_capacity, and the database holds each GPU once.
func TestConcurrentPlacementNeverGivesAGPUTwice(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		admin := s.Admin()
		for _, name := range []string{"n1", "n2", "n3"} {
			join(t, s, admin, name, 2)
		}
		const requests = 100
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			granted = map[string]string{}
			refused int
		)
		for i := range requests {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": s.Creds.ProjectID, "sku": "h100-80gb.1x"})
				mu.Lock()
				defer mu.Unlock()
				switch r.Status {
				case 201:
					for _, u := range r.JSON["gpu_uuids"].([]any) {
						if prev, dup := granted[u.(string)]; dup {
							t.Errorf("GPU %s given to %s and %s (request %d)", u, prev, r.String("id"), i)
						}
						granted[u.(string)] = r.String("id")
					}
				case 409:
					if r.ErrorCode() != "insufficient_capacity" {
						t.Errorf("refusal code %s: %s", r.ErrorCode(), r.Body)
					}
					refused++
				default:
					t.Errorf("status %d: %s", r.Status, r.Body)
				}
			}()
		}
		wg.Wait()
		if len(granted) != 6 || refused != requests-6 {
			t.Fatalf("granted %d GPUs, refused %d", len(granted), refused)
		}
		ns, _, err := s.DB.Queries().ListNodes(context.Background(), "", store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.FreeGPUs != 0 || n.LiveAllocations != 2 {
				t.Fatalf("node %s: free %d live %d", n.Name, n.FreeGPUs, n.LiveAllocations)
			}
		}
	})
}

type recordingHooks struct {
	mu    sync.Mutex
	down  []string
	ready []string
	lost  int
}

func (h *recordingHooks) NodeDown(_ context.Context, _ storage.Tx, n nodes.Node, lost []nodes.Allocation) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down = append(h.down, n.ID)
	h.lost += len(lost)
	return nil
}

func (h *recordingHooks) NodeReady(_ context.Context, _ storage.Tx, n nodes.Node, _ []nodeapi.Workload) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready = append(h.ready, n.ID)
	return nil
}

// A node whose last beat is older than TTL + grace is marked down, its
// allocations lost (hooks see them); a beat brings it back ready with its
// allocations active again. Time is moved, not slept.
func TestLivenessMarksDownAfterTTLPlusGrace(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		admin := s.Admin()
		n := join(t, s, admin, "mortal", 1)
		al := admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": s.Creds.ProjectID, "sku": "h100-80gb.1x"}).Want(t, 201)
		ctx := context.Background()
		node, err := s.DB.Queries().GetNode(ctx, n.id)
		if err != nil {
			t.Fatal(err)
		}
		now := node.LastHeartbeatAt
		live := nodes.New(nodes.Deps{Store: store.Nodes(s.DB), IAM: s.App.IAM, Now: func() time.Time { return now },
			HeartbeatTTL: nodes.DefaultHeartbeatTTL, HeartbeatGrace: nodes.DefaultHeartbeatGrace})
		hooks := &recordingHooks{}
		live.AddHooks(hooks)
		// Just inside TTL + grace: still ready.
		now = node.LastHeartbeatAt.Add(nodes.DefaultHeartbeatTTL + nodes.DefaultHeartbeatGrace - time.Millisecond)
		if marked, err := live.CheckLiveness(ctx); err != nil || marked != 0 {
			t.Fatalf("marked %d early (%v)", marked, err)
		}
		now = node.LastHeartbeatAt.Add(nodes.DefaultHeartbeatTTL + nodes.DefaultHeartbeatGrace + time.Millisecond)
		if marked, err := live.CheckLiveness(ctx); err != nil || marked != 1 {
			t.Fatalf("marked %d (%v)", marked, err)
		}
		if got := admin.Do("GET", "/api/v1/admin/nodes/"+n.id, nil).Want(t, 200).String("state"); got != "down" {
			t.Fatalf("state %s", got)
		}
		if got := admin.Do("GET", "/api/v1/projects/"+s.Creds.ProjectID+"/allocations/"+al.String("id"), nil).Want(t, 200).String("state"); got != "lost" {
			t.Fatalf("allocation %s", got)
		}
		if len(hooks.down) != 1 || hooks.lost != 1 {
			t.Fatalf("hooks %+v", hooks)
		}
		evs := eventTypes(t, s.DB)
		if evs[nodes.EventNodeDown] != 1 || evs[nodes.EventAllocationLost] != 1 {
			t.Fatalf("events %v", evs)
		}
		// Back: ready, allocation active again with a new interval.
		if got := n.beat(t, nil, nodeapi.Workload{ContainerID: "c1", Name: "w", State: "running"}).String("state"); got != "ready" {
			t.Fatalf("beat state %s", got)
		}
		if got := admin.Do("GET", "/api/v1/projects/"+s.Creds.ProjectID+"/allocations/"+al.String("id"), nil).Want(t, 200).String("state"); got != "active" {
			t.Fatalf("allocation %s", got)
		}
		if evs := eventTypes(t, s.DB); evs[nodes.EventNodeReady] != 2 {
			t.Fatalf("events %v", evs)
		}
		wl := admin.Do("GET", "/api/v1/admin/nodes/"+n.id, nil).Want(t, 200).JSON["workloads"].([]any)
		if len(wl) != 1 {
			t.Fatalf("workloads %v", wl)
		}
	})
}

// The server's own liveness worker, with a short TTL, marks a silent node
// down; the test waits on the worker's runs, not on a clock.
func TestLivenessWorkerWithShortTTL(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite, func(c *config.Config) { c.NodeHeartbeatTTL, c.NodeHeartbeatGrace = time.Second, 0 })
	admin := s.Admin()
	n := join(t, s, admin, "short", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var w *worker.Periodic
	for _, sv := range s.App.Workers {
		if p, ok := sv.(*worker.Periodic); ok && p.Name == "node-liveness" {
			w = p
		}
	}
	if w == nil {
		t.Fatal("the server runs no node-liveness worker")
	}
	for runs := w.Runs() + 1; ; runs++ {
		if err := w.WaitRuns(ctx, runs); err != nil {
			t.Fatal("node never marked down")
		}
		if node, _ := s.DB.Queries().GetNode(ctx, n.id); node.State == nodes.StateDown {
			return
		}
	}
}

func eventTypes(t *testing.T, db *store.DB) map[string]int {
	t.Helper()
	rows, err := db.Queries().NodeEventCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
