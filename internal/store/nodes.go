package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/nodes"
)

var (
	_ nodes.Tx      = (*Tx)(nil)
	_ nodes.Queries = (*Queries)(nil)
)

// Nodes is the nodes domain's storage.
func Nodes(db *DB) nodes.Store { return NewPort[nodes.Tx, nodes.Queries](db) }

func (q *Queries) InsertNodeJoinToken(ctx context.Context, t nodes.NodeJoinToken) error {
	_, err := q.exec(ctx, `INSERT INTO node_join_tokens (id, token_hash, description, created_by, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)`,
		t.ID, t.TokenHash, t.Description, t.CreatedBy, ts(t.CreatedAt), ts(t.ExpiresAt))
	return err
}

// GetNodeJoinTokenByHash finds a join token by the SHA-256 of its secret.
func (q *Queries) GetNodeJoinTokenByHash(ctx context.Context, hash string) (nodes.NodeJoinToken, error) {
	var (
		t    nodes.NodeJoinToken
		node sql.NullString
	)
	err := q.queryRow(ctx, `SELECT id, token_hash, description, created_by, created_at, expires_at, used_at, node_id FROM node_join_tokens WHERE token_hash = ?`, hash).
		Scan(&t.ID, &t.TokenHash, &t.Description, &t.CreatedBy, scanTime(&t.CreatedAt), scanTime(&t.ExpiresAt), scanTime(&t.UsedAt), &node)
	t.NodeID = node.String
	return t, scanOne(err)
}

// UseNodeJoinToken marks a token used by nodeID. ErrNotFound means it was
// used already (possibly by a concurrent join): the conditional update is
// what makes the token single use.
func (q *Queries) UseNodeJoinToken(ctx context.Context, id, nodeID string, at time.Time) error {
	return q.execOne(ctx, `UPDATE node_join_tokens SET used_at = ?, node_id = ? WHERE id = ? AND used_at IS NULL`, ts(at), nodeID, id)
}

const nodeCols = `id, name, state, key_id, public_key, inventory, inventory_digest, workloads, gpu_count, free_gpus, gpu_model, gpu_vendor,
	gpu_memory_mib, live_allocations, exclusive_allocation_id, tokens_valid_after, last_heartbeat_at, state_changed_at, created_at, updated_at, pending_allocations, drain_requested`

func scanNode(s interface{ Scan(...any) error }) (nodes.Node, error) {
	var (
		n  nodes.Node
		ex sql.NullString
	)
	err := s.Scan(&n.ID, &n.Name, (*string)(&n.State), &n.KeyID, &n.PublicKey, scanJSON(&n.Inventory), &n.InventoryDigest, scanJSON(&n.Workloads),
		&n.GPUCount, &n.FreeGPUs, &n.GPUModel, &n.GPUVendor, &n.GPUMemoryMiB, &n.LiveAllocations, &ex,
		scanTime(&n.TokensValidAfter), scanTime(&n.LastHeartbeatAt), scanTime(&n.StateChangedAt), scanTime(&n.CreatedAt), scanTime(&n.UpdatedAt), &n.PendingAllocations, &n.DrainRequested)
	n.ExclusiveAllocationID = ex.String
	return n, err
}

func (q *Queries) InsertNode(ctx context.Context, n nodes.Node) error {
	_, err := q.exec(ctx, `INSERT INTO nodes (`+nodeCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		n.ID, n.Name, string(n.State), n.KeyID, n.PublicKey, jsonText(n.Inventory), n.InventoryDigest, jsonText(n.Workloads), n.GPUCount, n.FreeGPUs,
		n.GPUModel, n.GPUVendor, n.GPUMemoryMiB, n.LiveAllocations, nil, ts(n.TokensValidAfter), ts(n.LastHeartbeatAt),
		ts(n.StateChangedAt), ts(n.CreatedAt), ts(n.UpdatedAt), n.PendingAllocations, n.DrainRequested)
	return err
}

func (q *Queries) GetNode(ctx context.Context, id string) (nodes.Node, error) {
	n, err := scanNode(q.queryRow(ctx, `SELECT `+nodeCols+` FROM nodes WHERE id = ?`, id))
	return n, scanOne(err)
}

// LockNode reads a node and, on PostgreSQL, holds its row lock until the
// transaction ends (SQLite transactions already hold the database's write
// lock from BEGIN).
func (q *Queries) LockNode(ctx context.Context, id string) (nodes.Node, error) {
	n, err := scanNode(q.queryRow(ctx, `SELECT `+nodeCols+` FROM nodes WHERE id = ?`+q.forUpdate(), id))
	return n, scanOne(err)
}

// ListNodes lists nodes in join order, optionally of one state.
func (q *Queries) ListNodes(ctx context.Context, state nodes.NodeState, p Page) ([]nodes.Node, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+nodeCols+` FROM nodes WHERE id > ? AND (? = '' OR state = ?) ORDER BY id`+limitClause(limit), after, string(state), string(state))
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanNode)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(n nodes.Node) string { return n.ID })
	return out, next, nil
}

// NodeAuth is what the per-request check of a node token reads.
func (q *Queries) NodeAuth(ctx context.Context, id string) (state nodes.NodeState, validAfter time.Time, err error) {
	err = q.queryRow(ctx, `SELECT state, tokens_valid_after FROM nodes WHERE id = ?`, id).Scan((*string)(&state), scanTime(&validAfter))
	return state, validAfter, scanOne(err)
}

// TouchNode records a heartbeat that changes nothing else.
func (q *Queries) TouchNode(ctx context.Context, id string, at time.Time) error {
	return q.execOne(ctx, `UPDATE nodes SET last_heartbeat_at = ? WHERE id = ?`, ts(at), id)
}

// ClearNodePending records that a node confirmed its placements.
func (q *Queries) ClearNodePending(ctx context.Context, id string) error {
	_, err := q.exec(ctx, `UPDATE nodes SET pending_allocations = 0 WHERE id = ?`, id)
	return err
}

// SetNodeWorkloads stores what the node reports running, with a heartbeat.
func (q *Queries) SetNodeWorkloads(ctx context.Context, id string, workloads []byte, at time.Time) error {
	return q.execOne(ctx, `UPDATE nodes SET workloads = ?, last_heartbeat_at = ? WHERE id = ?`, jsonText(workloads), ts(at), id)
}

// SetNodeState moves a node to state; a non-zero validAfter also cuts off
// its tokens minted before it.
func (q *Queries) SetNodeState(ctx context.Context, id string, state nodes.NodeState, validAfter, at time.Time) error {
	if validAfter.IsZero() {
		return q.execOne(ctx, `UPDATE nodes SET state = ?, state_changed_at = ?, updated_at = ? WHERE id = ?`, string(state), ts(at), ts(at), id)
	}
	return q.execOne(ctx, `UPDATE nodes SET state = ?, tokens_valid_after = ?, state_changed_at = ?, updated_at = ? WHERE id = ?`,
		string(state), ts(validAfter), ts(at), ts(at), id)
}

// RequestNodeDrain records that an admin drained the node; it is never
// cleared, whatever the node's liveness state does.
func (q *Queries) RequestNodeDrain(ctx context.Context, id string, at time.Time) error {
	return q.execOne(ctx, `UPDATE nodes SET drain_requested = ?, updated_at = ? WHERE id = ?`, true, ts(at), id)
}

// SetNodeInventory replaces a node's inventory, its GPUs and the placement
// summary. free_gpus is recomputed from the GPUs live allocations hold.
func (q *Queries) SetNodeInventory(ctx context.Context, n nodes.Node, gpus []nodes.NodeGPU, at time.Time) error {
	if _, err := q.exec(ctx, `DELETE FROM node_gpus WHERE node_id = ?`, n.ID); err != nil {
		return err
	}
	for _, g := range gpus {
		if _, err := q.exec(ctx, `INSERT INTO node_gpus (node_id, uuid, idx, model, vendor, memory_mib) VALUES (?, ?, ?, ?, ?, ?)`,
			n.ID, g.UUID, g.Index, g.Model, g.Vendor, g.MemoryMiB); err != nil {
			return err
		}
	}
	return q.execOne(ctx, q.greatest(`UPDATE nodes SET inventory = ?, inventory_digest = ?, gpu_count = ?, gpu_model = ?, gpu_vendor = ?, gpu_memory_mib = ?,
		free_gpus = CASE WHEN exclusive_allocation_id IS NOT NULL THEN 0 ELSE MAX_FN(0, ? - (SELECT COUNT(*) FROM allocation_gpus a JOIN node_gpus g ON g.node_id = a.node_id AND g.uuid = a.gpu_uuid WHERE a.node_id = ?)) END,
		last_heartbeat_at = ?, updated_at = ? WHERE id = ?`),
		jsonText(n.Inventory), n.InventoryDigest, n.GPUCount, n.GPUModel, n.GPUVendor, n.GPUMemoryMiB, n.GPUCount, n.ID, ts(at), ts(at), n.ID)
}

// NodeGPUs lists the GPUs of a node in index order.
func (q *Queries) NodeGPUs(ctx context.Context, nodeID string) ([]nodes.NodeGPU, error) {
	rows, err := q.query(ctx, `SELECT node_id, uuid, idx, model, vendor, memory_mib FROM node_gpus WHERE node_id = ? ORDER BY idx, uuid`, nodeID)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanNodeGPU)
}

func scanNodeGPU(s interface{ Scan(...any) error }) (nodes.NodeGPU, error) {
	var g nodes.NodeGPU
	err := s.Scan(&g.NodeID, &g.UUID, &g.Index, &g.Model, &g.Vendor, &g.MemoryMiB)
	return g, err
}

// ClaimPlacement picks a ready node with no drain requested that fits c —
// best fit first: the fewest free GPUs that still suffice, then by id —
// takes the capacity from it and reads the free GPUs matching c on it:
// c.GPUs free GPUs for a slice, the whole node for baremetal
// (exclusiveAllocationID then names the allocation). Model, vendor and memory filter the node's summary and
// then its GPUs. ErrNotFound means no node fits.
//
// On PostgreSQL the chosen row stays locked until the transaction ends,
// and with skipLocked rows locked by concurrent placements are skipped, so
// concurrent requests spread over nodes instead of queueing on one. The
// claim and the GPU read are one statement there (claimPostgres), with a
// second read only when the first may be stale. SQLite transactions hold
// the write lock from BEGIN: the claim, then the read.
func (q *Queries) ClaimPlacement(ctx context.Context, c nodes.PlacementQuery, exclusiveAllocationID string, at time.Time, skipLocked bool) (nodes.Claim, error) {
	set := `free_gpus = free_gpus - ?, live_allocations = live_allocations + 1, pending_allocations = pending_allocations + 1, updated_at = ?`
	setArgs := []any{c.GPUs, ts(at)}
	if c.Baremetal {
		set = `free_gpus = 0, live_allocations = live_allocations + 1, pending_allocations = pending_allocations + 1, exclusive_allocation_id = ?, updated_at = ?`
		setArgs = []any{exclusiveAllocationID, ts(at)}
	}
	if q.d == Postgres {
		return q.claimPostgres(ctx, c, set, setArgs, skipLocked)
	}
	cond, args := placementWhere(c)
	claim := `UPDATE nodes SET ` + set + ` WHERE id = (SELECT id FROM nodes WHERE ` + cond + ` ORDER BY free_gpus, id LIMIT 1) RETURNING id, gpu_count`
	var cl nodes.Claim
	if err := scanOne(q.queryRow(ctx, claim, append(setArgs, args...)...).Scan(&cl.NodeID, &cl.GPUCount)); err != nil {
		return nodes.Claim{}, err
	}
	var err error
	cl.Free, err = q.freeGPUs(ctx, c, cl.NodeID)
	return cl, err
}

// claimPostgres claims and reads the free GPUs in one round trip. The read
// runs with the statement's snapshot, taken before the row lock was
// granted: had a concurrent placement on that node committed in between,
// the read would miss its GPU holds. Every change to a node's holds also
// updates the node's row, so the statement compares the row version it
// locked (FOR UPDATE returns the newest) with the one its snapshot sees
// (xmin): equal, and the snapshot has every hold on the node; different —
// after waiting on the lock, or in a close race — and the GPUs are read
// again by a statement of its own, whose snapshot postdates the lock.
func (q *Queries) claimPostgres(ctx context.Context, c nodes.PlacementQuery, set string, setArgs []any, skipLocked bool) (nodes.Claim, error) {
	cond, args := placementWhere(c)
	lock := ` FOR UPDATE`
	if skipLocked {
		lock += ` SKIP LOCKED`
	}
	free, freeArgs := placementFreeQuery(c, "c.id")
	query := `WITH pick AS (SELECT id, xmin::text AS locked FROM nodes WHERE ` + cond + ` ORDER BY free_gpus, id LIMIT 1` + lock + `),
 claimed AS (UPDATE nodes n SET ` + set + ` FROM pick WHERE n.id = pick.id RETURNING n.id, n.gpu_count)
 SELECT c.id, c.gpu_count, (SELECT s.xmin::text FROM nodes s WHERE s.id = c.id) = p.locked,
  (SELECT COALESCE(json_agg(f.uuid ORDER BY f.idx, f.uuid), '[]')::text FROM (` + free + `) f)
 FROM claimed c JOIN pick p ON p.id = c.id`
	args = append(append(args, setArgs...), freeArgs...)
	var (
		cl      nodes.Claim
		current bool
		uuids   string
	)
	if err := scanOne(q.queryRow(ctx, query, args...).Scan(&cl.NodeID, &cl.GPUCount, &current, &uuids)); err != nil {
		return nodes.Claim{}, err
	}
	if !current {
		var err error
		cl.Free, err = q.freeGPUs(ctx, c, cl.NodeID)
		return cl, err
	}
	if err := json.Unmarshal([]byte(uuids), &cl.Free); err != nil {
		return nodes.Claim{}, fmt.Errorf("read claimed GPUs: %w", err)
	}
	if len(cl.Free) == 0 {
		cl.Free = nil // as the two-statement read gives
	}
	return cl, nil
}

// placementFreeQuery is the read of a node's GPUs that match c and no live
// allocation holds, in index order; node is the SQL naming the node id.
func placementFreeQuery(c nodes.PlacementQuery, node string) (string, []any) {
	limit := c.GPUs
	if c.Baremetal {
		limit = maxPlacementGPUs
	}
	return `SELECT g.uuid, g.idx FROM node_gpus g
		WHERE g.node_id = ` + node + ` AND (? = '' OR g.model = ?) AND (? = '' OR g.vendor = ?) AND g.memory_mib >= ?
		AND NOT EXISTS (SELECT 1 FROM allocation_gpus a WHERE a.node_id = g.node_id AND a.gpu_uuid = g.uuid)
		ORDER BY g.idx, g.uuid LIMIT ?`, []any{c.Model, c.Model, c.Vendor, c.Vendor, c.MinMemoryMiB, limit}
}

func (q *Queries) freeGPUs(ctx context.Context, c nodes.PlacementQuery, nodeID string) ([]string, error) {
	free, args := placementFreeQuery(c, "?")
	rows, err := q.query(ctx, free, append([]any{nodeID}, args...)...)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (string, error) {
		var (
			u   string
			idx int
		)
		return u, s.Scan(&u, &idx)
	})
}

// maxPlacementGPUs bounds the GPUs one node row is read for.
const maxPlacementGPUs = 1024

// PlacementPossible reports whether any node fits c in the committed state
// (no locks taken).
func (q *Queries) PlacementPossible(ctx context.Context, c nodes.PlacementQuery) (bool, error) {
	cond, args := placementWhere(c)
	var one int
	err := q.queryRow(ctx, `SELECT 1 FROM nodes WHERE `+cond+` LIMIT 1`, args...).Scan(&one)
	if err = scanOne(err); errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func placementWhere(c nodes.PlacementQuery) (string, []any) {
	cond := `state = 'ready' AND NOT drain_requested AND exclusive_allocation_id IS NULL AND free_gpus >= ?`
	args := []any{c.GPUs}
	if c.Baremetal {
		cond = `state = 'ready' AND NOT drain_requested AND exclusive_allocation_id IS NULL AND live_allocations = 0 AND free_gpus = gpu_count AND gpu_count >= ?`
	}
	if c.NodeID != "" {
		cond += ` AND id = ?`
		args = append(args, c.NodeID)
	}
	if c.Model != "" {
		cond += ` AND gpu_model = ?`
		args = append(args, c.Model)
	}
	if c.Vendor != "" {
		cond += ` AND gpu_vendor = ?`
		args = append(args, c.Vendor)
	}
	if c.MinMemoryMiB > 0 {
		cond += ` AND gpu_memory_mib >= ?`
		args = append(args, c.MinMemoryMiB)
	}
	return cond, args
}

// ReturnNodeCapacity gives an allocation's GPUs (and the whole node, for
// baremetal) back to its node.
func (q *Queries) ReturnNodeCapacity(ctx context.Context, nodeID, allocationID string, at time.Time) error {
	return q.execOne(ctx, q.greatest(`UPDATE nodes SET
		exclusive_allocation_id = CASE WHEN exclusive_allocation_id = ? THEN NULL ELSE exclusive_allocation_id END,
		live_allocations = CASE WHEN live_allocations > 0 THEN live_allocations - 1 ELSE 0 END,
		free_gpus = MAX_FN(0, gpu_count - (SELECT COUNT(*) FROM allocation_gpus a JOIN node_gpus g ON g.node_id = a.node_id AND g.uuid = a.gpu_uuid WHERE a.node_id = ?)),
		updated_at = ? WHERE id = ?`), allocationID, nodeID, ts(at), nodeID)
}

// StaleNodes lists nodes in one of states whose last heartbeat is before
// cutoff, oldest first.
func (q *Queries) StaleNodes(ctx context.Context, cutoff time.Time, limit int, states ...nodes.NodeState) ([]nodes.Node, error) {
	if len(states) == 0 { // IN () is an error on PostgreSQL; no state, no node
		return nil, nil
	}
	args := []any{ts(cutoff)}
	for _, s := range states {
		args = append(args, string(s))
	}
	args = append(args, limit)
	rows, err := q.query(ctx, `SELECT `+nodeCols+` FROM nodes WHERE last_heartbeat_at < ? AND state IN (`+placeholders(len(states))+`) ORDER BY last_heartbeat_at LIMIT ?`, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanNode)
}

// UseNodeAssertionID records that a node assertion id was exchanged;
// ErrAlreadyExists means a replay.
func (q *Queries) UseNodeAssertionID(ctx context.Context, nodeID, jti string, expiresAt time.Time) error {
	_, err := q.exec(ctx, `INSERT INTO node_assertions (node_id, jti, expires_at) VALUES (?, ?, ?)`, nodeID, jti, ts(expiresAt))
	return err
}

// PurgeExpiredNodeAssertionIDs forgets assertion ids past their expiry.
func (q *Queries) PurgeExpiredNodeAssertionIDs(ctx context.Context, now time.Time) error {
	_, err := q.exec(ctx, `DELETE FROM node_assertions WHERE expires_at < ?`, ts(now))
	return err
}

// greatest spells the two-argument maximum of the dialect in query.
func (q *Queries) greatest(query string) string {
	if q.d == Postgres {
		return strings.ReplaceAll(query, "MAX_FN(", "GREATEST(")
	}
	return strings.ReplaceAll(query, "MAX_FN(", "MAX(")
}

// NodeEventCounts counts the outbox events of the nodes domain by type.
func (q *Queries) NodeEventCounts(ctx context.Context) (map[string]int, error) {
	rows, err := q.query(ctx, `SELECT type, COUNT(*) FROM outbox_events WHERE type LIKE 'nodes.%' GROUP BY type`)
	if err != nil {
		return nil, err
	}
	type tc struct {
		t string
		n int
	}
	out := map[string]int{}
	tcs, err := collect(rows, func(s interface{ Scan(...any) error }) (tc, error) {
		var v tc
		return v, s.Scan(&v.t, &v.n)
	})
	for _, v := range tcs {
		out[v.t] = v.n
	}
	return out, err
}
