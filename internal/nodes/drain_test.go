package nodes_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// silence marks the node down as the liveness worker does once its last
// beat is older than TTL + grace (time is moved, not slept).
func silence(t *testing.T, s *servertest.Server, nodeID string) {
	t.Helper()
	ctx := context.Background()
	node, err := s.DB.Queries().GetNode(ctx, nodeID)
	if err != nil {
		t.Fatal(err)
	}
	now := node.LastHeartbeatAt.Add(nodes.DefaultHeartbeatTTL + nodes.DefaultHeartbeatGrace + time.Millisecond)
	live := nodes.New(nodes.Deps{Store: store.Nodes(s.DB), IAM: s.App.IAM, Now: func() time.Time { return now },
		HeartbeatTTL: nodes.DefaultHeartbeatTTL, HeartbeatGrace: nodes.DefaultHeartbeatGrace})
	if marked, err := live.CheckLiveness(ctx); err != nil || marked != 1 {
		t.Fatalf("marked %d down (%v)", marked, err)
	}
}

// drainCase is a node with 2 GPUs, one of them held by an allocation.
type drainCase struct {
	s     *servertest.Server
	admin *servertest.Client
	n     *agent
	alloc string
}

func newDrainCase(t *testing.T, d store.Dialect) drainCase {
	t.Helper()
	s := servertest.Start(t, d)
	admin := s.Admin()
	n := join(t, s, admin, "drained", 2)
	al := admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": s.Creds.ProjectID, "sku": "h100-80gb.1x"}).Want(t, 201)
	n.beat(t, nil) // confirms it
	return drainCase{s: s, admin: admin, n: n, alloc: al.String("id")}
}

func (c drainCase) nodeState(t *testing.T) string {
	t.Helper()
	return c.admin.Do("GET", "/api/v1/admin/nodes/"+c.n.id, nil).Want(t, 200).String("state")
}

func (c drainCase) allocState(t *testing.T) string {
	t.Helper()
	return c.admin.Do("GET", "/api/v1/projects/"+c.s.Creds.ProjectID+"/allocations/"+c.alloc, nil).Want(t, 200).String("state")
}

// backDraining checks the node's beat brought it back draining with its
// allocation active again (a new open billing interval) and that a new
// allocation on its free GPU is refused.
func (c drainCase) backDraining(t *testing.T) {
	t.Helper()
	if got := c.allocState(t); got != "lost" {
		t.Fatalf("allocation while down: %s", got)
	}
	if got := c.n.beat(t, nil).String("state"); got != "draining" {
		t.Fatalf("beat answered state %s, want draining", got)
	}
	if got := c.nodeState(t); got != "draining" {
		t.Fatalf("node %s after its beat, want draining", got)
	}
	if got := c.allocState(t); got != "active" {
		t.Fatalf("allocation %s after its node came back, want active", got)
	}
	iv, err := c.s.DB.Queries().AllocationIntervals(context.Background(), c.s.Creds.ProjectID, time.Time{}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(iv) != 2 || iv[0].EndedAt.IsZero() || !iv[1].EndedAt.IsZero() {
		t.Fatalf("billing intervals %+v: want the closed one and a new open one", iv)
	}
	r := c.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": c.s.Creds.ProjectID, "sku": "h100-80gb.1x", "node_id": c.n.id}).Want(t, 409)
	if r.ErrorCode() != "insufficient_capacity" {
		t.Fatalf("refusal %s", r.Body)
	}
	if got := c.n.beat(t, nil).String("state"); got != "draining" {
		t.Fatalf("next beat answered state %s", got)
	}
	evs := eventTypes(t, c.s.DB)
	if evs[nodes.EventNodeReady] != 1 || evs[nodes.EventNodeDraining] != 2 || evs[nodes.EventAllocationActive] != 2 {
		t.Fatalf("events %v: want ready once (the join), draining twice (the drain, the return), active twice", evs)
	}
}

// A drained node that misses its heartbeats comes back draining, not
// ready, and takes no new allocation.
func TestDrainedNodeComesBackDraining(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		c := newDrainCase(t, d)
		if got := c.admin.Do("POST", "/api/v1/admin/nodes/"+c.n.id+"/drain", nil).Want(t, 200).String("state"); got != "draining" {
			t.Fatalf("drained node %s", got)
		}
		silence(t, c.s, c.n.id)
		if got := c.nodeState(t); got != "down" {
			t.Fatalf("silent node %s", got)
		}
		c.backDraining(t)
	})
}

// A down node an admin drains stays down while it is silent; its next
// beat brings it back draining with its lost allocations active again.
func TestDownNodeDrainedComesBackDrainingWithItsAllocations(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		c := newDrainCase(t, d)
		silence(t, c.s, c.n.id)
		if r := c.admin.Do("POST", "/api/v1/admin/nodes/"+c.n.id+"/drain", nil).Want(t, 200); r.String("state") != "down" || r.JSON["drain_requested"] != true {
			t.Errorf("drained down node %s (drain_requested %v), want down until it beats, with its drain shown", r.String("state"), r.JSON["drain_requested"])
		}
		c.backDraining(t)
	})
}

// A control plane back from an outage (every replica stopped for an
// upgrade, a single-process install restarted) finds every node's last
// beat as old as the outage. Its liveness worker judges nobody until the
// agents have had TTL + grace to reach it: a node that beats meanwhile
// stays ready, and one that stays silent is marked down after.
func TestLivenessWaitsForAgentsAfterAnOutage(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	back, silent := join(t, s, admin, "back", 0), join(t, s, admin, "silent", 0)
	back.beat(t, nil)
	silent.beat(t, nil)
	ctx := context.Background()
	node, err := s.DB.Queries().GetNode(ctx, silent.id)
	if err != nil {
		t.Fatal(err)
	}
	// The control plane comes back an hour after the last beats.
	now := node.LastHeartbeatAt.Add(time.Hour)
	live := nodes.New(nodes.Deps{Store: store.Nodes(s.DB), IAM: s.App.IAM, Now: func() time.Time { return now },
		HeartbeatTTL: nodes.DefaultHeartbeatTTL, HeartbeatGrace: nodes.DefaultHeartbeatGrace}).Liveness(nil)
	state := func(n *agent) string {
		return admin.Do("GET", "/api/v1/admin/nodes/"+n.id, nil).Want(t, 200).String("state")
	}
	if err := live.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if state(back) != "ready" || state(silent) != "ready" {
		t.Fatalf("the first liveness pass after an outage marked nodes down: back %s, silent %s", state(back), state(silent))
	}
	// back's agent beats again (at the worker's time: the server that
	// took the beats above reads the wall clock, an hour behind it).
	now = now.Add(nodes.DefaultHeartbeatTTL + nodes.DefaultHeartbeatGrace)
	if err := s.DB.Queries().TouchNode(ctx, back.id, now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := live.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if state(silent) != "down" || state(back) != "ready" {
		t.Fatalf("TTL + grace after the control plane came back: silent %s (want down), back %s (want ready)", state(silent), state(back))
	}
}

// The liveness worker waits TTL + grace after every Start, not only the
// first: a replica whose schema guard paused its jobs (and refused the
// agents' beats meanwhile) starts them again later, and must not judge the
// beats it refused.
func TestLivenessWaitsForAgentsAfterARestartOfTheWorker(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	n := join(t, s, admin, "paused", 0)
	n.beat(t, nil)
	ctx := context.Background()
	node, err := s.DB.Queries().GetNode(ctx, n.id)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(node.LastHeartbeatAt.Add(time.Second))
	live := nodes.New(nodes.Deps{Store: store.Nodes(s.DB), IAM: s.App.IAM, Now: clk.Now,
		HeartbeatTTL: nodes.DefaultHeartbeatTTL, HeartbeatGrace: nodes.DefaultHeartbeatGrace}).Liveness(nil)
	runOnce := func() {
		t.Helper()
		runs := live.Runs()
		if err := live.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := live.WaitRuns(ctx, runs+1); err != nil {
			t.Fatal(err)
		}
		live.Stop()
	}
	runOnce() // listens from now
	// Paused past TTL + grace, while the node's beats were refused.
	clk.Advance(time.Hour)
	runOnce()
	if st := admin.Do("GET", "/api/v1/admin/nodes/"+n.id, nil).Want(t, 200).String("state"); st != "ready" {
		t.Fatalf("the liveness worker's first run after a restart marked the node %s, want ready", st)
	}
}
