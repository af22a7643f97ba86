package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// The nodes domain's storage (nodes.Store) on both dialects: nodes, join
// tokens, GPUs, assertion ids, placement claims, allocations and their
// intervals, and the node task queue.
func TestNodesConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		for _, c := range []conformanceCase{
			{"join_tokens", testNodeJoinTokens},
			{"node_round_trip", testNodeRoundTrip},
			{"node_updates", testNodeUpdates},
			{"inventory", testNodeInventory},
			{"list_nodes", testListNodes},
			{"stale_nodes", testStaleNodes},
			{"assertion_ids", testNodeAssertionIDs},
			{"placement_slice", testPlacementSlice},
			{"placement_baremetal", testPlacementBaremetal},
			{"allocations", testAllocations},
			{"allocation_states", testAllocationStates},
			{"allocation_lists", testAllocationLists},
			{"allocation_intervals", testAllocationIntervals},
			{"tasks", testNodeTasks},
			{"task_lease", testNodeTaskLease},
			{"task_lists", testNodeTaskLists},
		} {
			t.Run(c.name, func(t *testing.T) { c.run(t, db) })
		}
	})
}

func mkNode(t *testing.T, s nodes.Store, name string, state nodes.NodeState, gpus int, heartbeat time.Time) nodes.Node {
	t.Helper()
	n := nodes.Node{ID: newID(), Name: name, State: state, KeyID: newID(), PublicKey: "pk-" + name,
		Inventory: []byte(`{}`), Workloads: []byte(`[]`), GPUCount: gpus, FreeGPUs: gpus,
		TokensValidAfter: t0, LastHeartbeatAt: heartbeat, StateChangedAt: t0, CreatedAt: t0, UpdatedAt: t0}
	noErr(t, "insert node", s.Read().InsertNode(context.Background(), n))
	return n
}

// mkGPUNode makes a node with count GPUs GPU-<name>-<i> of model and
// memory and sets its inventory, as a joining agent's first report does.
func mkGPUNode(t *testing.T, s nodes.Store, name string, state nodes.NodeState, count int, model string, mem int64) (nodes.Node, []nodes.NodeGPU) {
	t.Helper()
	n := mkNode(t, s, name, state, 0, t0)
	var gpus []nodes.NodeGPU
	for i := 0; i < count; i++ {
		gpus = append(gpus, nodes.NodeGPU{NodeID: n.ID, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model, Vendor: "nvidia", MemoryMiB: mem})
	}
	n.GPUCount, n.GPUModel, n.GPUVendor, n.GPUMemoryMiB = count, model, "nvidia", mem
	noErr(t, "set inventory", s.Read().SetNodeInventory(context.Background(), n, gpus, t0))
	got, err := s.Read().GetNode(context.Background(), n.ID)
	noErr(t, "get node", err)
	return got, gpus
}

// sameNode compares nodes, their JSON fields by meaning.
func sameNode(t *testing.T, what string, got, want nodes.Node) {
	t.Helper()
	sameJSON(t, what+" inventory", got.Inventory, want.Inventory)
	sameJSON(t, what+" workloads", got.Workloads, want.Workloads)
	got.Inventory, want.Inventory, got.Workloads, want.Workloads = nil, nil, nil, nil
	same(t, what, got, want)
}

func testNodeJoinTokens(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Nodes(db).Read()
	tok := nodes.NodeJoinToken{ID: newID(), TokenHash: "hash-" + newID(), Description: "rack 4", CreatedBy: "admin", CreatedAt: t0, ExpiresAt: at(time.Hour)}
	noErr(t, "insert token", q.InsertNodeJoinToken(ctx, tok))
	got, err := q.GetNodeJoinTokenByHash(ctx, tok.TokenHash)
	noErr(t, "get token", err)
	same(t, "token round trip", got, tok)

	dup := tok
	dup.ID = newID()
	wantErr(t, "duplicate token hash", q.InsertNodeJoinToken(ctx, dup), storage.ErrAlreadyExists)
	dup = tok
	dup.TokenHash = "other"
	wantErr(t, "duplicate token id", q.InsertNodeJoinToken(ctx, dup), storage.ErrAlreadyExists)
	_, err = q.GetNodeJoinTokenByHash(ctx, "no-such-hash")
	wantErr(t, "unknown hash", err, storage.ErrNotFound)

	// Single use: the second redemption finds no unused token.
	nodeID := newID()
	noErr(t, "use token", q.UseNodeJoinToken(ctx, tok.ID, nodeID, at(time.Minute)))
	wantErr(t, "token used twice", q.UseNodeJoinToken(ctx, tok.ID, newID(), at(2*time.Minute)), storage.ErrNotFound)
	wantErr(t, "unknown token used", q.UseNodeJoinToken(ctx, newID(), nodeID, t0), storage.ErrNotFound)
	got, err = q.GetNodeJoinTokenByHash(ctx, tok.TokenHash)
	noErr(t, "get used token", err)
	tok.UsedAt, tok.NodeID = at(time.Minute), nodeID
	same(t, "used token (the first use is kept)", got, tok)
}

func testNodeRoundTrip(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Nodes(db)
	q := s.Read()
	n := nodes.Node{ID: newID(), Name: "gpu-01", State: nodes.StateJoining, KeyID: "kid-" + newID(), PublicKey: "-----BEGIN PUBLIC KEY-----\nx\n-----END PUBLIC KEY-----\n",
		Inventory:       []byte(`{"hostname": "gpu-01", "gpus": [{"uuid": "GPU-a", "memory_mib": 81559}], "labels": {"b": "2", "a": "1"}}`),
		InventoryDigest: "sha256:abc", Workloads: []byte(`[{"id": "w1", "state": "running"}]`),
		GPUCount: 8, FreeGPUs: 6, GPUModel: "H100", GPUVendor: "nvidia", GPUMemoryMiB: 81559, LiveAllocations: 2, PendingAllocations: 1,
		DrainRequested: true, ExclusiveAllocationID: "", TokensValidAfter: at(-time.Hour), LastHeartbeatAt: at(time.Second), StateChangedAt: at(2 * time.Second),
		CreatedAt: t0, UpdatedAt: at(3 * time.Second)}
	noErr(t, "insert node", q.InsertNode(ctx, n))
	got, err := q.GetNode(ctx, n.ID)
	noErr(t, "get node", err)
	sameNode(t, "node round trip", got, n)
	noErr(t, "lock node", s.InTx(ctx, func(q nodes.Queries) error {
		got, err := q.LockNode(ctx, n.ID)
		if err != nil {
			return err
		}
		sameNode(t, "locked node", got, n)
		_, err = q.LockNode(ctx, newID())
		wantErr(t, "lock missing node", err, storage.ErrNotFound)
		return nil
	}))
	state, validAfter, err := q.NodeAuth(ctx, n.ID)
	noErr(t, "node auth", err)
	if state != nodes.StateJoining || !validAfter.Equal(n.TokensValidAfter) {
		t.Fatalf("node auth = %q %v, want joining %v", state, validAfter, n.TokensValidAfter)
	}

	_, err = q.GetNode(ctx, newID())
	wantErr(t, "missing node", err, storage.ErrNotFound)
	_, _, err = q.NodeAuth(ctx, newID())
	wantErr(t, "auth of missing node", err, storage.ErrNotFound)

	dup := n
	dup.KeyID = "kid-" + newID()
	wantErr(t, "duplicate node id", q.InsertNode(ctx, dup), storage.ErrAlreadyExists)
	dup = n
	dup.ID = newID()
	wantErr(t, "duplicate key id", q.InsertNode(ctx, dup), storage.ErrAlreadyExists)
	bad := n
	bad.ID, bad.KeyID, bad.State = newID(), newID(), "exploded"
	wantErr(t, "unknown state", q.InsertNode(ctx, bad), storage.ErrConflict)
	bad = n
	bad.ID, bad.KeyID, bad.FreeGPUs = newID(), newID(), n.GPUCount+1
	wantErr(t, "more free GPUs than GPUs", q.InsertNode(ctx, bad), storage.ErrConflict)
}

func testNodeUpdates(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Nodes(db).Read()
	n := mkNode(t, store.Nodes(db), "upd", nodes.StateJoining, 2, t0)
	missing := newID()

	noErr(t, "touch", q.TouchNode(ctx, n.ID, at(time.Minute)))
	wantErr(t, "touch missing", q.TouchNode(ctx, missing, t0), storage.ErrNotFound)
	want := n
	want.LastHeartbeatAt = at(time.Minute)
	got, _ := q.GetNode(ctx, n.ID)
	sameNode(t, "after touch (heartbeat only)", got, want)

	wl := []byte(`[{"id": "c1", "labels": {"x": "y"}}]`)
	noErr(t, "set workloads", q.SetNodeWorkloads(ctx, n.ID, wl, at(2*time.Minute)))
	wantErr(t, "workloads of missing node", q.SetNodeWorkloads(ctx, missing, wl, t0), storage.ErrNotFound)
	want.Workloads, want.LastHeartbeatAt = wl, at(2*time.Minute)
	got, _ = q.GetNode(ctx, n.ID)
	sameNode(t, "after workloads", got, want)

	// A state change without validAfter keeps the token cut-off.
	noErr(t, "set state", q.SetNodeState(ctx, n.ID, nodes.StateReady, time.Time{}, at(3*time.Minute)))
	want.State, want.StateChangedAt, want.UpdatedAt = nodes.StateReady, at(3*time.Minute), at(3*time.Minute)
	got, _ = q.GetNode(ctx, n.ID)
	sameNode(t, "after ready", got, want)
	// One with validAfter moves it.
	noErr(t, "set state with cut-off", q.SetNodeState(ctx, n.ID, nodes.StateRemoved, at(4*time.Minute), at(5*time.Minute)))
	want.State, want.TokensValidAfter, want.StateChangedAt, want.UpdatedAt = nodes.StateRemoved, at(4*time.Minute), at(5*time.Minute), at(5*time.Minute)
	got, _ = q.GetNode(ctx, n.ID)
	sameNode(t, "after removed", got, want)
	wantErr(t, "state of missing node", q.SetNodeState(ctx, missing, nodes.StateDown, time.Time{}, t0), storage.ErrNotFound)
	wantErr(t, "state of missing node with cut-off", q.SetNodeState(ctx, missing, nodes.StateDown, t0, t0), storage.ErrNotFound)
	wantErr(t, "unknown state", q.SetNodeState(ctx, n.ID, "exploded", time.Time{}, t0), storage.ErrConflict)

	// A drain request is kept whatever the state does.
	noErr(t, "request drain", q.RequestNodeDrain(ctx, n.ID, at(6*time.Minute)))
	wantErr(t, "drain of missing node", q.RequestNodeDrain(ctx, missing, t0), storage.ErrNotFound)
	noErr(t, "set state after drain", q.SetNodeState(ctx, n.ID, nodes.StateDown, time.Time{}, at(7*time.Minute)))
	want.State, want.DrainRequested, want.StateChangedAt, want.UpdatedAt = nodes.StateDown, true, at(7*time.Minute), at(7*time.Minute)
	got, _ = q.GetNode(ctx, n.ID)
	sameNode(t, "after drain and down", got, want)

	// Pending placements are cleared by a confirming heartbeat.
	p := mkNode(t, store.Nodes(db), "pending", nodes.StateReady, 2, t0)
	// Its summary says 2 GPUs but no inventory listed any: the claim
	// takes capacity and reads no GPU, the same on both dialects.
	cl, err := claim(t, store.Nodes(db), nodes.PlacementQuery{GPUs: 1, NodeID: p.ID}, "", t0)
	noErr(t, "claim", err)
	same(t, "claim of a node without GPU rows", cl, nodes.Claim{NodeID: p.ID, GPUCount: 2})
	got, _ = q.GetNode(ctx, p.ID)
	if got.PendingAllocations != 1 {
		t.Fatalf("pending after a claim = %d, want 1", got.PendingAllocations)
	}
	noErr(t, "clear pending", q.ClearNodePending(ctx, p.ID))
	got, _ = q.GetNode(ctx, p.ID)
	if got.PendingAllocations != 0 || got.LiveAllocations != 1 {
		t.Fatalf("after clear: pending %d live %d, want 0 and 1", got.PendingAllocations, got.LiveAllocations)
	}
}

func testNodeInventory(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Nodes(db)
	q := s.Read()
	o := mkOrg(t, db, "inv")
	p := mkProject(t, db, o, "inv")
	n := mkNode(t, s, "inv", nodes.StateReady, 0, t0)
	gpus := []nodes.NodeGPU{
		{NodeID: n.ID, UUID: "GPU-c", Index: 2, Model: "H100", Vendor: "nvidia", MemoryMiB: 81559},
		{NodeID: n.ID, UUID: "GPU-a", Index: 0, Model: "H100", Vendor: "nvidia", MemoryMiB: 81559},
		{NodeID: n.ID, UUID: "GPU-b", Index: 1, Model: "H100", Vendor: "nvidia", MemoryMiB: 81559},
	}
	inv := n
	inv.Inventory, inv.InventoryDigest = []byte(`{"gpus": 3}`), "sha256:3"
	inv.GPUCount, inv.GPUModel, inv.GPUVendor, inv.GPUMemoryMiB = 3, "H100", "nvidia", 81559
	inv.FreeGPUs = 0 // recomputed by the query, not taken from the caller
	noErr(t, "set inventory", q.SetNodeInventory(ctx, inv, gpus, at(time.Minute)))
	got, err := q.NodeGPUs(ctx, n.ID)
	noErr(t, "node gpus", err)
	same(t, "GPUs in index order", got, []nodes.NodeGPU{gpus[1], gpus[2], gpus[0]})
	want := inv
	want.FreeGPUs, want.LastHeartbeatAt, want.UpdatedAt = 3, at(time.Minute), at(time.Minute)
	gotNode, _ := q.GetNode(ctx, n.ID)
	sameNode(t, "node after inventory", gotNode, want)

	// A live allocation's GPU stays taken when the inventory is replaced;
	// a GPU the new inventory lacks drops out.
	a := nodes.Allocation{ID: newID(), OrgID: o.ID, ProjectID: p.ID, NodeID: n.ID, Shape: "gpu_slice", SKU: "h100.1x", GPUCount: 1,
		GPUUUIDs: []string{"GPU-a"}, State: nodes.AllocActive, CreatedBy: "t", CreatedAt: t0, UpdatedAt: t0}
	noErr(t, "insert allocation", q.InsertAllocation(ctx, a))
	gpus2 := []nodes.NodeGPU{gpus[1], gpus[2], {NodeID: n.ID, UUID: "GPU-d", Index: 3, Model: "H100", Vendor: "nvidia", MemoryMiB: 81559}}
	inv.GPUCount = 3
	noErr(t, "replace inventory", q.SetNodeInventory(ctx, inv, gpus2, at(2*time.Minute)))
	got, _ = q.NodeGPUs(ctx, n.ID)
	same(t, "replaced GPUs", got, []nodes.NodeGPU{gpus[1], gpus2[1], gpus2[2]})
	gotNode, _ = q.GetNode(ctx, n.ID)
	if gotNode.FreeGPUs != 2 {
		t.Fatalf("free GPUs with one held = %d, want 2", gotNode.FreeGPUs)
	}
	got, _ = q.NodeGPUs(ctx, newID())
	if len(got) != 0 {
		t.Fatalf("GPUs of a missing node = %v", got)
	}

	missing := inv
	missing.ID = newID()
	wantErr(t, "inventory of missing node", q.SetNodeInventory(ctx, missing, nil, t0), storage.ErrNotFound)
	wantErr(t, "GPUs of missing node", q.SetNodeInventory(ctx, missing, []nodes.NodeGPU{{NodeID: missing.ID, UUID: "x"}}, t0), storage.ErrConflict)
	dupGPU := []nodes.NodeGPU{gpus[0], gpus[0]}
	wantErr(t, "one GPU twice", q.SetNodeInventory(ctx, inv, dupGPU, t0), storage.ErrAlreadyExists)
}

func testListNodes(t *testing.T, db *store.DB) {
	db = storetest.Open(t, db.Dialect()) // counts every node
	ctx := context.Background()
	s := store.Nodes(db)
	var ready, all []string
	for i := 0; i < 7; i++ {
		st := nodes.StateReady
		if i%3 == 0 {
			st = nodes.StateDown
		}
		n := mkNode(t, s, fmt.Sprintf("list-%d", i), st, 1, t0)
		all = append(all, n.ID)
		if st == nodes.StateReady {
			ready = append(ready, n.ID)
		}
	}
	ids := func(ns []nodes.Node) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.ID)
		}
		return out
	}
	got := pageAll(t, 2, func(p storage.Page) ([]nodes.Node, string, error) { return s.Read().ListNodes(ctx, "", p) })
	same(t, "all nodes in join order", ids(got), all)
	got = pageAll(t, 3, func(p storage.Page) ([]nodes.Node, string, error) {
		return s.Read().ListNodes(ctx, nodes.StateReady, p)
	})
	same(t, "ready nodes", ids(got), ready)
	got, next, err := s.Read().ListNodes(ctx, nodes.StateDraining, storage.Page{})
	if err != nil || len(got) != 0 || next != "" {
		t.Fatalf("no draining nodes: %v %q %v", got, next, err)
	}

	// Clamping: 501 more nodes, inserted in one transaction.
	noErr(t, "bulk nodes", s.InTx(ctx, func(q nodes.Queries) error {
		for i := 0; i < storage.MaxPageLimit+1-len(all); i++ {
			if err := q.InsertNode(ctx, nodes.Node{ID: newID(), Name: "bulk", State: nodes.StateJoining, KeyID: newID(), Inventory: []byte(`{}`), Workloads: []byte(`[]`),
				TokensValidAfter: t0, LastHeartbeatAt: t0, StateChangedAt: t0, CreatedAt: t0, UpdatedAt: t0}); err != nil {
				return err
			}
		}
		return nil
	}))
	checkClamp(t, storage.MaxPageLimit+1, func(p storage.Page) ([]nodes.Node, string, error) { return s.Read().ListNodes(ctx, "", p) })
}

func testStaleNodes(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Nodes(db)
	// Other cases' nodes beat at t0 or later: these beat hours before.
	base := at(-10 * time.Hour)
	cutoff := base.Add(-30 * time.Second)
	// Made newest beat first: the order must come from the beats, not ids.
	joining := mkNode(t, s, "stale-joining", nodes.StateJoining, 1, base.Add(-time.Minute))
	draining := mkNode(t, s, "stale-draining", nodes.StateDraining, 1, base.Add(-2*time.Minute))
	oldest := mkNode(t, s, "stale-ready", nodes.StateReady, 1, base.Add(-3*time.Minute))
	mkNode(t, s, "stale-down", nodes.StateDown, 1, base.Add(-4*time.Minute)) // not a watched state
	mkNode(t, s, "at-cutoff", nodes.StateReady, 1, cutoff)                   // not before the cutoff
	mkNode(t, s, "fresh", nodes.StateReady, 1, base.Add(time.Second))        // beat after it
	watched := []nodes.NodeState{nodes.StateReady, nodes.StateDraining, nodes.StateJoining}

	got, err := s.Read().StaleNodes(ctx, cutoff, 10, watched...)
	noErr(t, "stale nodes", err)
	var ids []string
	for _, n := range got {
		ids = append(ids, n.Name)
	}
	same(t, "stale nodes, oldest beat first", ids, []string{oldest.Name, draining.Name, joining.Name})
	sameNode(t, "stale node row", got[0], oldest)

	got, err = s.Read().StaleNodes(ctx, cutoff, 2, watched...)
	if err != nil || len(got) != 2 || got[0].ID != oldest.ID {
		t.Fatalf("limited stale nodes: %d %v", len(got), err)
	}
	got, err = s.Read().StaleNodes(ctx, cutoff, 10, nodes.StateDraining)
	if err != nil || len(got) != 1 || got[0].ID != draining.ID {
		t.Fatalf("stale draining nodes: %v %v", got, err)
	}
	if got, err := s.Read().StaleNodes(ctx, cutoff, 10); err != nil || len(got) != 0 {
		t.Fatalf("stale nodes in no state: %v %v", got, err)
	}
	// A heartbeat takes a node out.
	noErr(t, "touch", s.Read().TouchNode(ctx, oldest.ID, t0))
	got, _ = s.Read().StaleNodes(ctx, cutoff, 10, watched...)
	if len(got) != 2 || got[0].ID != draining.ID {
		t.Fatalf("after a beat: %d stale, first %v", len(got), got)
	}
}

func testNodeAssertionIDs(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Nodes(db).Read()
	n1, n2 := newID(), newID()
	noErr(t, "use jti", q.UseNodeAssertionID(ctx, n1, "j1", at(time.Minute)))
	wantErr(t, "replayed jti", q.UseNodeAssertionID(ctx, n1, "j1", at(time.Minute)), storage.ErrAlreadyExists)
	noErr(t, "same jti, other node", q.UseNodeAssertionID(ctx, n2, "j1", at(time.Minute)))
	noErr(t, "early jti", q.UseNodeAssertionID(ctx, n1, "j0", at(-time.Minute)))
	noErr(t, "jti expiring now", q.UseNodeAssertionID(ctx, n1, "jnow", t0))

	noErr(t, "purge", q.PurgeExpiredNodeAssertionIDs(ctx, t0))
	noErr(t, "expired jti forgotten", q.UseNodeAssertionID(ctx, n1, "j0", at(time.Hour)))
	wantErr(t, "jti expiring at the purge kept", q.UseNodeAssertionID(ctx, n1, "jnow", at(time.Hour)), storage.ErrAlreadyExists)
	wantErr(t, "live jti kept", q.UseNodeAssertionID(ctx, n1, "j1", at(time.Hour)), storage.ErrAlreadyExists)
}

// claim runs ClaimPlacement in a transaction, as the domain does.
func claim(t *testing.T, s nodes.Store, c nodes.PlacementQuery, exclusive string, when time.Time) (nodes.Claim, error) {
	t.Helper()
	var cl nodes.Claim
	err := s.InTx(context.Background(), func(q nodes.Queries) error {
		var err error
		cl, err = q.ClaimPlacement(context.Background(), c, exclusive, when, q.Dialect() == storage.Postgres)
		return err
	})
	return cl, err
}

func testPlacementSlice(t *testing.T, db *store.DB) {
	db = storetest.Open(t, db.Dialect()) // best fit over every node
	ctx := context.Background()
	s := store.Nodes(db)
	q := s.Read()
	o := mkOrg(t, db, "place")
	p := mkProject(t, db, o, "place")
	big, bigGPUs := mkGPUNode(t, s, "big", nodes.StateReady, 4, "H100", 81559)
	small, smallGPUs := mkGPUNode(t, s, "small", nodes.StateReady, 2, "H100", 81559)
	mkGPUNode(t, s, "down", nodes.StateDown, 8, "H100", 81559)
	drained, _ := mkGPUNode(t, s, "drained", nodes.StateReady, 8, "H100", 81559)
	noErr(t, "request drain", q.RequestNodeDrain(ctx, drained.ID, t0))
	a100, _ := mkGPUNode(t, s, "a100", nodes.StateReady, 2, "A100", 40960)

	ok, err := q.PlacementPossible(ctx, nodes.PlacementQuery{GPUs: 5})
	if err != nil || ok {
		t.Fatalf("5 GPUs possible = %v %v; only a down node and a drained one have them", ok, err)
	}
	ok, err = q.PlacementPossible(ctx, nodes.PlacementQuery{GPUs: 2, Model: "A100", MinMemoryMiB: 40960})
	if err != nil || !ok {
		t.Fatalf("2 A100 possible = %v %v", ok, err)
	}
	_, err = claim(t, s, nodes.PlacementQuery{GPUs: 5}, "", t0)
	wantErr(t, "no node fits", err, storage.ErrNotFound)
	_, err = claim(t, s, nodes.PlacementQuery{GPUs: 1, MinMemoryMiB: 90000}, "", t0)
	wantErr(t, "no node has that memory", err, storage.ErrNotFound)
	_, err = claim(t, s, nodes.PlacementQuery{GPUs: 1, Vendor: "amd"}, "", t0)
	wantErr(t, "no node of that vendor", err, storage.ErrNotFound)

	// Best fit: the fewest free GPUs that suffice, H100 only.
	cl, err := claim(t, s, nodes.PlacementQuery{GPUs: 2, Model: "H100"}, "", at(time.Minute))
	noErr(t, "claim 2 H100", err)
	same(t, "best-fit claim", cl, nodes.Claim{NodeID: small.ID, GPUCount: 2, Free: []string{smallGPUs[0].UUID, smallGPUs[1].UUID}})
	got, _ := q.GetNode(ctx, small.ID)
	if got.FreeGPUs != 0 || got.LiveAllocations != 1 || got.PendingAllocations != 1 || !got.UpdatedAt.Equal(at(time.Minute)) {
		t.Fatalf("claimed node: free %d live %d pending %d updated %v", got.FreeGPUs, got.LiveAllocations, got.PendingAllocations, got.UpdatedAt)
	}

	// Held GPUs are not offered again; the claim names the next free ones.
	hold := func(node nodes.Node, uuids ...string) nodes.Allocation {
		a := nodes.Allocation{ID: newID(), OrgID: o.ID, ProjectID: p.ID, NodeID: node.ID, Shape: "gpu_slice", SKU: "h100", GPUCount: len(uuids),
			GPUUUIDs: uuids, State: nodes.AllocPending, CreatedBy: "t", CreatedAt: t0, UpdatedAt: t0}
		noErr(t, "hold GPUs", q.InsertAllocation(ctx, a))
		return a
	}
	cl, err = claim(t, s, nodes.PlacementQuery{GPUs: 1, NodeID: big.ID}, "", t0)
	noErr(t, "claim on big", err)
	same(t, "first free GPU", cl.Free, []string{bigGPUs[0].UUID})
	a1 := hold(big, bigGPUs[0].UUID)
	cl, err = claim(t, s, nodes.PlacementQuery{GPUs: 2, NodeID: big.ID}, "", t0)
	noErr(t, "claim 2 on big", err)
	same(t, "next free GPUs", cl.Free, []string{bigGPUs[1].UUID, bigGPUs[2].UUID})
	a2 := hold(big, bigGPUs[1].UUID, bigGPUs[2].UUID)
	_, err = claim(t, s, nodes.PlacementQuery{GPUs: 2, NodeID: big.ID}, "", t0)
	wantErr(t, "big has one GPU left", err, storage.ErrNotFound)

	// Releasing returns the capacity the remaining holds leave.
	noErr(t, "free a2", q.FreeAllocationGPUs(ctx, a2.ID))
	noErr(t, "return a2", q.ReturnNodeCapacity(ctx, big.ID, a2.ID, at(2*time.Minute)))
	got, _ = q.GetNode(ctx, big.ID)
	if got.FreeGPUs != 3 || got.LiveAllocations != 1 || !got.UpdatedAt.Equal(at(2*time.Minute)) {
		t.Fatalf("after release: free %d live %d updated %v; want 3, 1", got.FreeGPUs, got.LiveAllocations, got.UpdatedAt)
	}
	noErr(t, "free a1", q.FreeAllocationGPUs(ctx, a1.ID))
	for i := 0; i < 3; i++ { // never below zero
		noErr(t, "return", q.ReturnNodeCapacity(ctx, big.ID, a1.ID, t0))
	}
	got, _ = q.GetNode(ctx, big.ID)
	if got.FreeGPUs != 4 || got.LiveAllocations != 0 {
		t.Fatalf("after all released: free %d live %d; want 4, 0", got.FreeGPUs, got.LiveAllocations)
	}
	wantErr(t, "return to a missing node", q.ReturnNodeCapacity(ctx, newID(), a1.ID, t0), storage.ErrNotFound)

	// A node leaving ready is not placed on.
	noErr(t, "drain", q.SetNodeState(ctx, a100.ID, nodes.StateDraining, time.Time{}, t0))
	_, err = claim(t, s, nodes.PlacementQuery{GPUs: 1, Model: "A100"}, "", t0)
	wantErr(t, "draining node", err, storage.ErrNotFound)
}

func testPlacementBaremetal(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Nodes(db)
	q := s.Read()
	o := mkOrg(t, db, "bm")
	p := mkProject(t, db, o, "bm")
	model := "BM-" + newID() // scopes every query to this case's nodes
	n, gpus := mkGPUNode(t, s, "bm", nodes.StateReady, 3, model, 81559)
	other, _ := mkGPUNode(t, s, "bm-busy", nodes.StateReady, 8, model, 81559)
	_, err := claim(t, s, nodes.PlacementQuery{GPUs: 1, NodeID: other.ID}, "", t0)
	noErr(t, "slice on the 8-GPU node", err)

	ok, err := q.PlacementPossible(ctx, nodes.PlacementQuery{Baremetal: true, GPUs: 4, Model: model})
	if err != nil || ok {
		t.Fatalf("baremetal of 4 possible = %v %v; the only such node has a live allocation", ok, err)
	}
	allocID := newID()
	cl, err := claim(t, s, nodes.PlacementQuery{Baremetal: true, GPUs: 1, Model: model}, allocID, at(time.Minute))
	noErr(t, "baremetal claim", err)
	same(t, "baremetal claim takes every GPU", cl, nodes.Claim{NodeID: n.ID, GPUCount: 3, Free: []string{gpus[0].UUID, gpus[1].UUID, gpus[2].UUID}})
	got, _ := q.GetNode(ctx, n.ID)
	if got.FreeGPUs != 0 || got.ExclusiveAllocationID != allocID || got.LiveAllocations != 1 {
		t.Fatalf("after baremetal claim: free %d exclusive %q live %d", got.FreeGPUs, got.ExclusiveAllocationID, got.LiveAllocations)
	}
	_, err = claim(t, s, nodes.PlacementQuery{GPUs: 0, NodeID: n.ID}, "", t0)
	wantErr(t, "slice on an exclusive node", err, storage.ErrNotFound)
	a := nodes.Allocation{ID: allocID, OrgID: o.ID, ProjectID: p.ID, NodeID: n.ID, Shape: "baremetal", SKU: "bm", GPUCount: 3,
		GPUUUIDs: cl.Free, State: nodes.AllocPending, CreatedBy: "t", CreatedAt: t0, UpdatedAt: t0}
	noErr(t, "insert baremetal allocation", q.InsertAllocation(ctx, a))
	// An inventory report keeps an exclusive node at zero free.
	noErr(t, "inventory", q.SetNodeInventory(ctx, got, gpus, at(2*time.Minute)))
	got, _ = q.GetNode(ctx, n.ID)
	if got.FreeGPUs != 0 || got.ExclusiveAllocationID != allocID {
		t.Fatalf("exclusive node after inventory: free %d exclusive %q", got.FreeGPUs, got.ExclusiveAllocationID)
	}
	// Returning another allocation's capacity leaves the exclusive hold.
	noErr(t, "return other", q.ReturnNodeCapacity(ctx, n.ID, newID(), t0))
	got, _ = q.GetNode(ctx, n.ID)
	if got.ExclusiveAllocationID != allocID {
		t.Fatalf("another allocation's release cleared the exclusive hold")
	}
	noErr(t, "free", q.FreeAllocationGPUs(ctx, allocID))
	noErr(t, "return", q.ReturnNodeCapacity(ctx, n.ID, allocID, t0))
	got, _ = q.GetNode(ctx, n.ID)
	if got.FreeGPUs != 3 || got.ExclusiveAllocationID != "" || got.LiveAllocations != 0 {
		t.Fatalf("after baremetal release: free %d exclusive %q live %d", got.FreeGPUs, got.ExclusiveAllocationID, got.LiveAllocations)
	}
	ok, err = q.PlacementPossible(ctx, nodes.PlacementQuery{Baremetal: true, GPUs: 3, Model: model})
	if err != nil || !ok {
		t.Fatalf("baremetal possible again = %v %v", ok, err)
	}
}

func mkAllocation(o iam.Org, p iam.Project, n nodes.Node, state nodes.AllocationState, uuids ...string) nodes.Allocation {
	return nodes.Allocation{ID: newID(), OrgID: o.ID, ProjectID: p.ID, NodeID: n.ID, Shape: "gpu_slice", SKU: "h100.x", GPUCount: len(uuids),
		GPUUUIDs: append([]string{}, uuids...), State: state, CreatedBy: "user:1", CreatedAt: t0, UpdatedAt: at(time.Second)}
}

func testAllocations(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Nodes(db)
	q := s.Read()
	o := mkOrg(t, db, "alloc")
	p := mkProject(t, db, o, "alloc")
	n, gpus := mkGPUNode(t, s, "alloc", nodes.StateReady, 4, "H100", 81559)

	a := mkAllocation(o, p, n, nodes.AllocPending, gpus[0].UUID, gpus[1].UUID)
	a.SKU = "h100.2x"
	noErr(t, "insert", q.InsertAllocation(ctx, a))
	got, err := q.GetAllocation(ctx, a.ID)
	noErr(t, "get", err)
	same(t, "allocation round trip", got, a)
	_, err = q.GetAllocation(ctx, newID())
	wantErr(t, "missing allocation", err, storage.ErrNotFound)

	noGPUs := mkAllocation(o, p, n, nodes.AllocPending)
	noGPUs.GPUUUIDs = nil
	noErr(t, "insert without GPUs", q.InsertAllocation(ctx, noGPUs))
	got, _ = q.GetAllocation(ctx, noGPUs.ID)
	if got.GPUUUIDs == nil || len(got.GPUUUIDs) != 0 {
		t.Fatalf("no GPUs read back as %#v, want an empty list", got.GPUUUIDs)
	}

	wantErr(t, "duplicate id", q.InsertAllocation(ctx, mkAllocationWithID(a.ID, o, p, n)), storage.ErrAlreadyExists)
	wantErr(t, "GPU held by another allocation", q.InsertAllocation(ctx, mkAllocation(o, p, n, nodes.AllocPending, gpus[2].UUID, gpus[1].UUID)), storage.ErrAlreadyExists)
	// In a mutation PostgreSQL sends the insert with the commit: the
	// conflict must still fail the mutation and leave nothing.
	dup := mkAllocation(o, p, n, nodes.AllocPending, gpus[1].UUID)
	err = s.Mutate(ctx, func(tx nodes.Tx) error {
		if err := tx.InsertAllocation(ctx, dup); err != nil {
			return err
		}
		return audited(tx)
	})
	wantErr(t, "GPU held by another allocation, in a mutation", err, storage.ErrAlreadyExists)
	_, err = q.GetAllocation(ctx, dup.ID)
	wantErr(t, "the refused allocation", err, storage.ErrNotFound)

	badProject := mkAllocation(o, iam.Project{ID: newID()}, n, nodes.AllocPending)
	wantErr(t, "missing project", q.InsertAllocation(ctx, badProject), storage.ErrConflict)
	badNode := mkAllocation(o, p, nodes.Node{ID: newID()}, nodes.AllocPending)
	wantErr(t, "missing node", q.InsertAllocation(ctx, badNode), storage.ErrConflict)
	badState := mkAllocation(o, p, n, "exploded")
	wantErr(t, "unknown state", q.InsertAllocation(ctx, badState), storage.ErrConflict)
	badShape := mkAllocation(o, p, n, nodes.AllocPending)
	badShape.Shape = "vm"
	wantErr(t, "unknown shape", q.InsertAllocation(ctx, badShape), storage.ErrConflict)

	// Freed GPUs can be held again; the freed allocation keeps its record.
	noErr(t, "free", q.FreeAllocationGPUs(ctx, a.ID))
	noErr(t, "free twice", q.FreeAllocationGPUs(ctx, a.ID))
	noErr(t, "hold freed GPU", q.InsertAllocation(ctx, mkAllocation(o, p, n, nodes.AllocPending, gpus[1].UUID)))
	got, _ = q.GetAllocation(ctx, a.ID)
	same(t, "freed allocation keeps its GPU list", got.GPUUUIDs, a.GPUUUIDs)
}

func mkAllocationWithID(id string, o iam.Org, p iam.Project, n nodes.Node) nodes.Allocation {
	a := mkAllocation(o, p, n, nodes.AllocPending)
	a.ID = id
	return a
}

func testAllocationStates(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Nodes(db)
	q := s.Read()
	o := mkOrg(t, db, "states")
	p := mkProject(t, db, o, "states")
	n := mkNode(t, s, "states", nodes.StateReady, 0, t0)
	a := mkAllocation(o, p, n, nodes.AllocPending)
	noErr(t, "insert", q.InsertAllocation(ctx, a))

	wantErr(t, "from the wrong state", q.SetAllocationState(ctx, a.ID, nodes.AllocActive, nodes.AllocReleasing, t0), storage.ErrNotFound)
	wantErr(t, "missing allocation", q.SetAllocationState(ctx, newID(), nodes.AllocPending, nodes.AllocActive, t0), storage.ErrNotFound)
	noErr(t, "pending→active", q.SetAllocationState(ctx, a.ID, nodes.AllocPending, nodes.AllocActive, at(time.Minute)))
	wantErr(t, "pending→active again (a concurrent change won)", q.SetAllocationState(ctx, a.ID, nodes.AllocPending, nodes.AllocActive, at(time.Minute)), storage.ErrNotFound)
	a.State, a.UpdatedAt = nodes.AllocActive, at(time.Minute)
	got, _ := q.GetAllocation(ctx, a.ID)
	same(t, "active", got, a)
	if !got.Live() {
		t.Fatal("an active allocation is live")
	}
	wantErr(t, "unknown state", q.SetAllocationState(ctx, a.ID, nodes.AllocActive, "exploded", t0), storage.ErrConflict)

	noErr(t, "active→releasing", q.SetAllocationState(ctx, a.ID, nodes.AllocActive, nodes.AllocReleasing, at(2*time.Minute)))
	wantErr(t, "active→released from releasing", q.SetAllocationState(ctx, a.ID, nodes.AllocActive, nodes.AllocReleased, at(3*time.Minute)), storage.ErrNotFound)
	noErr(t, "releasing→released", q.SetAllocationState(ctx, a.ID, nodes.AllocReleasing, nodes.AllocReleased, at(3*time.Minute)))
	a.State, a.UpdatedAt, a.ReleasedAt = nodes.AllocReleased, at(3*time.Minute), at(3*time.Minute)
	got, _ = q.GetAllocation(ctx, a.ID)
	same(t, "released (with its time)", got, a)
	if got.Live() {
		t.Fatal("a released allocation is not live")
	}

	// Lost is not released: it keeps no release time.
	l := mkAllocation(o, p, n, nodes.AllocActive)
	noErr(t, "insert", q.InsertAllocation(ctx, l))
	noErr(t, "active→lost", q.SetAllocationState(ctx, l.ID, nodes.AllocActive, nodes.AllocLost, at(time.Hour)))
	got, _ = q.GetAllocation(ctx, l.ID)
	if got.State != nodes.AllocLost || !got.ReleasedAt.IsZero() || !got.UpdatedAt.Equal(at(time.Hour)) {
		t.Fatalf("lost allocation = %+v", got)
	}
}

func testAllocationLists(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Nodes(db)
	q := s.Read()
	o := mkOrg(t, db, "lists")
	p1, p2 := mkProject(t, db, o, "one"), mkProject(t, db, o, "two")
	n1, n2 := mkNode(t, s, "l1", nodes.StateReady, 0, t0), mkNode(t, s, "l2", nodes.StateReady, 0, t0)
	var all []nodes.Allocation
	for i, c := range []struct {
		p  iam.Project
		n  nodes.Node
		st nodes.AllocationState
	}{
		{p1, n1, nodes.AllocPending}, {p1, n2, nodes.AllocActive}, {p2, n1, nodes.AllocActive}, {p1, n1, nodes.AllocReleased},
		{p2, n2, nodes.AllocLost}, {p1, n1, nodes.AllocActive}, {p1, n1, nodes.AllocReleasing},
	} {
		a := mkAllocation(o, c.p, c.n, c.st, fmt.Sprintf("GPU-%d", i))
		if c.st == nodes.AllocReleased {
			a.ReleasedAt = at(time.Hour)
		}
		noErr(t, "insert", q.InsertAllocation(ctx, a))
		all = append(all, a)
	}
	pick := func(idx ...int) []nodes.Allocation {
		var out []nodes.Allocation
		for _, i := range idx {
			out = append(out, all[i])
		}
		return out
	}
	list := func(f nodes.AllocationFilter, limit int) []nodes.Allocation {
		return pageAll(t, limit, func(p storage.Page) ([]nodes.Allocation, string, error) { return q.ListAllocations(ctx, f, p) })
	}
	allIDs := make([]string, len(all))
	for i, a := range all {
		allIDs[i] = a.ID
	}
	allocID := func(a nodes.Allocation) string { return a.ID }
	same(t, "all (of this case)", mine(list(nodes.AllocationFilter{}, 2), allocID, allIDs), all)
	same(t, "of project one", list(nodes.AllocationFilter{ProjectID: p1.ID}, 2), pick(0, 1, 3, 5, 6))
	same(t, "on node one", list(nodes.AllocationFilter{NodeID: n1.ID}, 3), pick(0, 2, 3, 5, 6))
	same(t, "active (of this case)", mine(list(nodes.AllocationFilter{State: nodes.AllocActive}, 1), allocID, allIDs), pick(1, 2, 5))
	same(t, "active of project one on node one", list(nodes.AllocationFilter{ProjectID: p1.ID, NodeID: n1.ID, State: nodes.AllocActive}, 1), pick(5))
	if _, _, err := q.ListAllocations(ctx, nodes.AllocationFilter{}, storage.Page{Cursor: "garbage!"}); err == nil {
		t.Fatal("a garbage cursor must be refused")
	}

	got, err := q.AllocationsOfNode(ctx, n1.ID, nodes.AllocPending, nodes.AllocActive, nodes.AllocReleasing, nodes.AllocLost)
	noErr(t, "live of node one", err)
	same(t, "live allocations of node one", got, pick(0, 2, 5, 6))
	got, _ = q.AllocationsOfNode(ctx, n2.ID, nodes.AllocLost)
	same(t, "lost of node two", got, pick(4))
	got, _ = q.AllocationsOfNode(ctx, newID(), nodes.AllocActive)
	if len(got) != 0 {
		t.Fatalf("allocations of a missing node: %v", got)
	}
	if got, err := q.AllocationsOfNode(ctx, n1.ID); err != nil || len(got) != 0 {
		t.Fatalf("allocations in no state: %v %v", got, err)
	}
}

func testAllocationIntervals(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Nodes(db)
	q := s.Read()
	o := mkOrg(t, db, "iv")
	p := mkProject(t, db, o, "iv")
	n := mkNode(t, s, "iv", nodes.StateReady, 0, t0)
	a, b := mkAllocation(o, p, n, nodes.AllocActive), mkAllocation(o, p, n, nodes.AllocActive)
	noErr(t, "insert a", q.InsertAllocation(ctx, a))
	noErr(t, "insert b", q.InsertAllocation(ctx, b))

	iv := nodes.AllocationInterval{ID: newID(), AllocationID: a.ID, OrgID: o.ID, ProjectID: p.ID, NodeID: n.ID, SKU: "h100.x", GPUCount: 2, StartedAt: t0}
	noErr(t, "open", q.OpenAllocationInterval(ctx, iv))
	wantErr(t, "duplicate interval", q.OpenAllocationInterval(ctx, iv), storage.ErrAlreadyExists)
	dangling := iv
	dangling.ID, dangling.AllocationID = newID(), newID()
	wantErr(t, "interval of a missing allocation", q.OpenAllocationInterval(ctx, dangling), storage.ErrConflict)
	ivB := nodes.AllocationInterval{ID: newID(), AllocationID: b.ID, OrgID: o.ID, ProjectID: p.ID, NodeID: n.ID, SKU: "h100.y", GPUCount: 1, StartedAt: at(time.Minute)}
	noErr(t, "open b", q.OpenAllocationInterval(ctx, ivB))

	// Billing meters what the nodes domain writes here.
	since := func(when time.Time) []billing.AllocationInterval {
		got, err := store.Billing(db).Read().AllocationIntervalsSince(ctx, when)
		noErr(t, "intervals since", err)
		return got
	}
	want := []billing.AllocationInterval{
		{ID: iv.ID, AllocationID: a.ID, OrgID: o.ID, ProjectID: p.ID, SKU: "h100.x", GPUCount: 2, Start: t0},
		{ID: ivB.ID, AllocationID: b.ID, OrgID: o.ID, ProjectID: p.ID, SKU: "h100.y", GPUCount: 1, Start: at(time.Minute)},
	}
	same(t, "open intervals", since(at(time.Hour)), want)

	noErr(t, "close a", q.CloseAllocationInterval(ctx, a.ID, at(10*time.Minute)))
	noErr(t, "close a again keeps the first end", q.CloseAllocationInterval(ctx, a.ID, at(20*time.Minute)))
	noErr(t, "close an allocation without interval", q.CloseAllocationInterval(ctx, newID(), t0))
	want[0].End = at(10 * time.Minute)
	same(t, "a closed at its first close", since(at(10*time.Minute)), want)
	same(t, "a ended before since", since(at(10*time.Minute+time.Microsecond)), want[1:])

	// A reopened allocation gets a new interval; the closed one stays.
	iv2 := iv
	iv2.ID, iv2.StartedAt = newID(), at(30*time.Minute)
	noErr(t, "reopen a", q.OpenAllocationInterval(ctx, iv2))
	noErr(t, "close a", q.CloseAllocationInterval(ctx, a.ID, at(40*time.Minute)))
	got := since(t0)
	if len(got) != 3 || !got[0].End.Equal(at(10*time.Minute)) || !got[2].End.Equal(at(40*time.Minute)) {
		t.Fatalf("intervals after reopen: %+v", got)
	}
}

func testNodeTasks(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Nodes(db)
	q := s.Read()
	n := mkNode(t, s, "tasks", nodes.StateReady, 0, t0)
	tk := nodes.NodeTask{ID: newID(), NodeID: n.ID, Kind: "start_container", InstanceID: newID(), ProjectID: newID(), Payload: "sealed:v1:abc",
		State: nodes.TaskSucceeded, Attempt: 7, LeaseExpiresAt: at(time.Hour), ReasonCode: "ignored", Message: "ignored", Result: []byte(`{}`),
		CreatedAt: t0, UpdatedAt: at(time.Second), CompletedAt: at(time.Hour)}
	noErr(t, "insert", q.InsertNodeTask(ctx, tk))
	got, err := q.GetNodeTask(ctx, tk.ID)
	noErr(t, "get", err)
	// A new task is queued, never attempted, with no lease or result.
	want := nodes.NodeTask{ID: tk.ID, NodeID: n.ID, Kind: tk.Kind, InstanceID: tk.InstanceID, ProjectID: tk.ProjectID, Payload: tk.Payload,
		State: nodes.TaskQueued, CreatedAt: t0, UpdatedAt: at(time.Second)}
	same(t, "new task", got, want)
	_, err = q.GetNodeTask(ctx, newID())
	wantErr(t, "missing task", err, storage.ErrNotFound)
	wantErr(t, "duplicate task", q.InsertNodeTask(ctx, tk), storage.ErrAlreadyExists)
	dangling := tk
	dangling.ID, dangling.NodeID = newID(), newID()
	wantErr(t, "task of a missing node", q.InsertNodeTask(ctx, dangling), storage.ErrConflict)

	// Completion records the result once.
	res := []byte(`{"ok": true, "containers": [{"id": "c1"}], "exit": 0}`)
	noErr(t, "complete", q.CompleteNodeTask(ctx, tk.ID, nodes.TaskFailed, "image_pull", "pull failed", res, at(time.Minute)))
	wantErr(t, "complete twice", q.CompleteNodeTask(ctx, tk.ID, nodes.TaskSucceeded, "", "", nil, at(2*time.Minute)), storage.ErrNotFound)
	wantErr(t, "complete a missing task", q.CompleteNodeTask(ctx, newID(), nodes.TaskSucceeded, "", "", nil, t0), storage.ErrNotFound)
	got, _ = q.GetNodeTask(ctx, tk.ID)
	sameJSON(t, "result", got.Result, res)
	got.Result = nil
	want.State, want.ReasonCode, want.Message, want.CompletedAt, want.UpdatedAt = nodes.TaskFailed, "image_pull", "pull failed", at(time.Minute), at(time.Minute)
	same(t, "completed task (the first result kept)", got, want)
	wantErr(t, "lease a completed task", q.LeaseNodeTask(ctx, tk.ID, at(time.Hour), at(2*time.Hour)), storage.ErrNotFound)

	// A result may be empty (no JSON at all).
	t2 := nodes.NodeTask{ID: newID(), NodeID: n.ID, Kind: "k", Payload: "p", CreatedAt: t0, UpdatedAt: t0}
	noErr(t, "insert", q.InsertNodeTask(ctx, t2))
	noErr(t, "complete without result", q.CompleteNodeTask(ctx, t2.ID, nodes.TaskSucceeded, "", "", nil, t0))
	got, _ = q.GetNodeTask(ctx, t2.ID)
	if got.Result != nil || got.State != nodes.TaskSucceeded {
		t.Fatalf("completed without result: %+v", got)
	}
	t3 := nodes.NodeTask{ID: newID(), NodeID: n.ID, Kind: "k", Payload: "p", CreatedAt: t0, UpdatedAt: t0}
	noErr(t, "insert", q.InsertNodeTask(ctx, t3))
	wantErr(t, "complete into an unknown state", q.CompleteNodeTask(ctx, t3.ID, "exploded", "", "", nil, t0), storage.ErrConflict)
}

func testNodeTaskLease(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Nodes(db)
	q := s.Read()
	n, other := mkNode(t, s, "lease", nodes.StateReady, 0, t0), mkNode(t, s, "lease-other", nodes.StateReady, 0, t0)
	mk := func(node nodes.Node) nodes.NodeTask {
		tk := nodes.NodeTask{ID: newID(), NodeID: node.ID, Kind: "k", Payload: "p", CreatedAt: t0, UpdatedAt: t0}
		noErr(t, "insert", q.InsertNodeTask(ctx, tk))
		return tk
	}
	a, b, c := mk(n), mk(n), mk(n)
	mk(other)
	deliverable := func(now time.Time, limit int) []string {
		got, err := q.DeliverableNodeTasks(ctx, n.ID, now, limit)
		noErr(t, "deliverable", err)
		var ids []string
		for _, tk := range got {
			ids = append(ids, tk.ID)
		}
		return ids
	}
	same(t, "queued tasks, oldest first", deliverable(t0, 10), []string{a.ID, b.ID, c.ID})
	same(t, "limited", deliverable(t0, 2), []string{a.ID, b.ID})

	lease := at(time.Minute)
	noErr(t, "lease a", q.LeaseNodeTask(ctx, a.ID, t0, lease))
	wantErr(t, "lease a again (another poll won)", q.LeaseNodeTask(ctx, a.ID, at(time.Second), at(2*time.Minute)), storage.ErrNotFound)
	wantErr(t, "lease a missing task", q.LeaseNodeTask(ctx, newID(), t0, lease), storage.ErrNotFound)
	got, _ := q.GetNodeTask(ctx, a.ID)
	if got.State != nodes.TaskLeased || got.Attempt != 1 || !got.LeaseExpiresAt.Equal(lease) || !got.UpdatedAt.Equal(t0) {
		t.Fatalf("leased task = %+v", got)
	}
	same(t, "a leased task is not delivered", deliverable(at(30*time.Second), 10), []string{b.ID, c.ID})
	same(t, "nor at its lease's end", deliverable(lease, 10), []string{b.ID, c.ID})
	wantErr(t, "lease at its lease's end", q.LeaseNodeTask(ctx, a.ID, lease, at(2*time.Minute)), storage.ErrNotFound)

	// After the lease ran out the task is delivered and leased again.
	after := lease.Add(time.Millisecond)
	same(t, "expired lease delivered again", deliverable(after, 10), []string{a.ID, b.ID, c.ID})
	noErr(t, "lease a after expiry", q.LeaseNodeTask(ctx, a.ID, after, at(3*time.Minute)))
	got, _ = q.GetNodeTask(ctx, a.ID)
	if got.Attempt != 2 || !got.LeaseExpiresAt.Equal(at(3*time.Minute)) {
		t.Fatalf("re-leased task: attempt %d lease %v", got.Attempt, got.LeaseExpiresAt)
	}

	// A leased task completes, its lease cleared, and is never delivered
	// again; a late result after the lease ran out still counts.
	noErr(t, "complete a", q.CompleteNodeTask(ctx, a.ID, nodes.TaskSucceeded, "", "done", []byte(`{"ok":true}`), at(4*time.Minute)))
	got, _ = q.GetNodeTask(ctx, a.ID)
	if got.State != nodes.TaskSucceeded || !got.LeaseExpiresAt.IsZero() || got.Attempt != 2 || !got.CompletedAt.Equal(at(4*time.Minute)) {
		t.Fatalf("completed task = %+v", got)
	}
	same(t, "completed task not delivered", deliverable(at(time.Hour), 10), []string{b.ID, c.ID})
	noErr(t, "lease b", q.LeaseNodeTask(ctx, b.ID, t0, at(time.Second)))
	noErr(t, "late result of b", q.CompleteNodeTask(ctx, b.ID, nodes.TaskFailed, "timeout", "", nil, at(time.Hour)))
	same(t, "only c left", deliverable(at(2*time.Hour), 10), []string{c.ID})
}

func testNodeTaskLists(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Nodes(db)
	q := s.Read()
	n1, n2 := mkNode(t, s, "tl1", nodes.StateReady, 0, t0), mkNode(t, s, "tl2", nodes.StateReady, 0, t0)
	inst := newID()
	var all []string
	byFilter := map[string][]string{}
	for i := 0; i < 6; i++ {
		n := n1
		if i%2 == 1 {
			n = n2
		}
		tk := nodes.NodeTask{ID: newID(), NodeID: n.ID, Kind: "k", Payload: "p", CreatedAt: t0, UpdatedAt: t0}
		if i < 3 {
			tk.InstanceID = inst
		}
		noErr(t, "insert", q.InsertNodeTask(ctx, tk))
		if i == 0 || i == 3 {
			noErr(t, "lease", q.LeaseNodeTask(ctx, tk.ID, t0, at(time.Minute)))
		}
		all = append(all, tk.ID)
		if n.ID == n1.ID {
			byFilter["n1"] = append(byFilter["n1"], tk.ID)
		}
		if i < 3 {
			byFilter["inst"] = append(byFilter["inst"], tk.ID)
		}
		if i == 0 || i == 3 {
			byFilter["leased"] = append(byFilter["leased"], tk.ID)
		}
	}
	list := func(f nodes.NodeTaskFilter, limit int) []string {
		got := pageAll(t, limit, func(p storage.Page) ([]nodes.NodeTask, string, error) { return q.ListNodeTasks(ctx, f, p) })
		var ids []string
		for _, tk := range got {
			ids = append(ids, tk.ID)
		}
		return ids
	}
	self := func(id string) string { return id }
	same(t, "all tasks (of this case)", mine(list(nodes.NodeTaskFilter{}, 4), self, all), all)
	same(t, "tasks of node one", list(nodes.NodeTaskFilter{NodeID: n1.ID}, 2), byFilter["n1"])
	same(t, "tasks of the instance", list(nodes.NodeTaskFilter{InstanceID: inst}, 1), byFilter["inst"])
	same(t, "leased tasks (of this case)", mine(list(nodes.NodeTaskFilter{State: nodes.TaskLeased}, 1), self, all), byFilter["leased"])
	same(t, "leased tasks of node one for the instance", list(nodes.NodeTaskFilter{NodeID: n1.ID, InstanceID: inst, State: nodes.TaskLeased}, 5), all[:1])
	if _, _, err := q.ListNodeTasks(ctx, nodes.NodeTaskFilter{}, storage.Page{Cursor: "garbage!"}); err == nil {
		t.Fatal("a garbage cursor must be refused")
	}
}
