package store

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/nodes"
)

const allocationCols = `id, org_id, project_id, node_id, shape, sku, gpu_count, gpu_uuids, state, created_by, created_at, updated_at, released_at`

func scanAllocation(s interface{ Scan(...any) error }) (nodes.Allocation, error) {
	var (
		a     nodes.Allocation
		uuids []byte
	)
	err := s.Scan(&a.ID, &a.OrgID, &a.ProjectID, &a.NodeID, &a.Shape, &a.SKU, &a.GPUCount, scanJSON(&uuids), (*string)(&a.State), &a.CreatedBy,
		scanTime(&a.CreatedAt), scanTime(&a.UpdatedAt), scanTime(&a.ReleasedAt))
	if err == nil && len(uuids) > 0 {
		err = json.Unmarshal(uuids, &a.GPUUUIDs)
	}
	if a.GPUUUIDs == nil {
		a.GPUUUIDs = []string{}
	}
	return a, err
}

// InsertAllocation writes an allocation and the rows holding its GPUs. A
// GPU another live allocation holds fails with ErrAlreadyExists.
func (q *Queries) InsertAllocation(ctx context.Context, a nodes.Allocation) error {
	uuids, err := json.Marshal(append([]string{}, a.GPUUUIDs...))
	if err != nil {
		return err
	}
	if err := q.execHeld(ctx, `INSERT INTO allocations (`+allocationCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.ID, a.OrgID, a.ProjectID, a.NodeID, a.Shape, a.SKU, a.GPUCount, jsonText(uuids), string(a.State), a.CreatedBy,
		ts(a.CreatedAt), ts(a.UpdatedAt), nullTS(a.ReleasedAt)); err != nil {
		return err
	}
	if len(a.GPUUUIDs) == 0 {
		return nil
	}
	// One multi-row statement for the holds.
	var b strings.Builder
	args := make([]any, 0, 3*len(a.GPUUUIDs))
	b.WriteString(`INSERT INTO allocation_gpus (node_id, gpu_uuid, allocation_id) VALUES `)
	for i, u := range a.GPUUUIDs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?)")
		args = append(args, a.NodeID, u, a.ID)
	}
	return q.execHeld(ctx, b.String(), args...)
}

func (q *Queries) GetAllocation(ctx context.Context, id string) (nodes.Allocation, error) {
	a, err := scanAllocation(q.queryRow(ctx, `SELECT `+allocationCols+` FROM allocations WHERE id = ?`, id))
	return a, scanOne(err)
}

// ListAllocations lists allocations in creation order.
func (q *Queries) ListAllocations(ctx context.Context, f nodes.AllocationFilter, p Page) ([]nodes.Allocation, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+allocationCols+` FROM allocations WHERE id > ?
		AND (? = '' OR project_id = ?) AND (? = '' OR node_id = ?) AND (? = '' OR state = ?) ORDER BY id`+limitClause(limit),
		after, f.ProjectID, f.ProjectID, f.NodeID, f.NodeID, string(f.State), string(f.State))
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanAllocation)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(a nodes.Allocation) string { return a.ID })
	return out, next, nil
}

// AllocationsOfNode lists a node's allocations in one of states.
func (q *Queries) AllocationsOfNode(ctx context.Context, nodeID string, states ...nodes.AllocationState) ([]nodes.Allocation, error) {
	if len(states) == 0 { // IN () is an error on PostgreSQL; no state, no allocation
		return nil, nil
	}
	args := []any{nodeID}
	for _, s := range states {
		args = append(args, string(s))
	}
	rows, err := q.query(ctx, `SELECT `+allocationCols+` FROM allocations WHERE node_id = ? AND state IN (`+placeholders(len(states))+`) ORDER BY id`, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAllocation)
}

// SetAllocationState moves an allocation from one state to another;
// ErrNotFound means it was not in from (a concurrent change won).
func (q *Queries) SetAllocationState(ctx context.Context, id string, from, to nodes.AllocationState, at time.Time) error {
	if to == nodes.AllocReleased {
		return q.execOne(ctx, `UPDATE allocations SET state = ?, updated_at = ?, released_at = ? WHERE id = ? AND state = ?`, string(to), ts(at), ts(at), id, string(from))
	}
	return q.execOne(ctx, `UPDATE allocations SET state = ?, updated_at = ? WHERE id = ? AND state = ?`, string(to), ts(at), id, string(from))
}

// FreeAllocationGPUs drops the rows holding an allocation's GPUs.
func (q *Queries) FreeAllocationGPUs(ctx context.Context, allocationID string) error {
	_, err := q.exec(ctx, `DELETE FROM allocation_gpus WHERE allocation_id = ?`, allocationID)
	return err
}

// OpenAllocationInterval starts an active interval.
func (q *Queries) OpenAllocationInterval(ctx context.Context, i nodes.AllocationInterval) error {
	return q.execHeld(ctx, `INSERT INTO allocation_intervals (id, allocation_id, org_id, project_id, node_id, sku, gpu_count, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		i.ID, i.AllocationID, i.OrgID, i.ProjectID, i.NodeID, i.SKU, i.GPUCount, ts(i.StartedAt))
}

// CloseAllocationInterval ends the open interval of an allocation, if any.
func (q *Queries) CloseAllocationInterval(ctx context.Context, allocationID string, at time.Time) error {
	_, err := q.exec(ctx, `UPDATE allocation_intervals SET ended_at = ? WHERE allocation_id = ? AND ended_at IS NULL`, ts(at), allocationID)
	return err
}

// AllocationIntervals lists the intervals of a project that overlap
// [from, to), for billing.
func (q *Queries) AllocationIntervals(ctx context.Context, projectID string, from, to time.Time) ([]nodes.AllocationInterval, error) {
	rows, err := q.query(ctx, `SELECT id, allocation_id, org_id, project_id, node_id, sku, gpu_count, started_at, ended_at FROM allocation_intervals
		WHERE project_id = ? AND started_at < ? AND (ended_at IS NULL OR ended_at > ?) ORDER BY started_at, id`, projectID, ts(to), ts(from))
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (nodes.AllocationInterval, error) {
		var i nodes.AllocationInterval
		err := s.Scan(&i.ID, &i.AllocationID, &i.OrgID, &i.ProjectID, &i.NodeID, &i.SKU, &i.GPUCount, scanTime(&i.StartedAt), scanTime(&i.EndedAt))
		return i, err
	})
}
