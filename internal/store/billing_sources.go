package store

import (
	"context"
	"time"
)

// Billing's reads of the nodes domain's tables (allocations, issue 11).

// AllocationIntervalsSince lists the allocation intervals of every project
// that are still open or ended at or after since: what the metering worker
// may still have to record.
func (q *Queries) AllocationIntervalsSince(ctx context.Context, since time.Time) ([]AllocationInterval, error) {
	rows, err := q.query(ctx, `SELECT id, allocation_id, org_id, project_id, node_id, sku, gpu_count, started_at, ended_at FROM allocation_intervals
		WHERE ended_at IS NULL OR ended_at >= ? ORDER BY started_at, id`, ts(since))
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (AllocationInterval, error) {
		var i AllocationInterval
		err := s.Scan(&i.ID, &i.AllocationID, &i.OrgID, &i.ProjectID, &i.NodeID, &i.SKU, &i.GPUCount, scanTime(&i.StartedAt), scanTime(&i.EndedAt))
		return i, err
	})
}

// ProjectHeldGPUs counts the GPUs a project's allocations hold now: every
// allocation not yet released.
func (q *Queries) ProjectHeldGPUs(ctx context.Context, projectID string) (int64, error) {
	var n int64
	err := q.queryRow(ctx, `SELECT COALESCE(SUM(gpu_count), 0) FROM allocations WHERE project_id = ? AND state <> 'released'`, projectID).Scan(&n)
	return n, mapErr(err)
}

// Billing's reads of the app-instances domain's tables (issue 12).

// InstanceStatusChange is one lifecycle row of an app instance's timeline:
// the status it entered, and when.
type InstanceStatusChange struct {
	InstanceID string
	EventID    string
	Status     string
	At         time.Time
}

// InstanceStatusChanges returns the timelines, oldest first per instance,
// of every instance that is serving now (running, upgrading, rolling back)
// or that changed status at or after since: everything whose running time
// the metering worker may still have to record.
func (q *Queries) InstanceStatusChanges(ctx context.Context, since time.Time) ([]InstanceStatusChange, error) {
	rows, err := q.query(ctx, `SELECT e.instance_id, e.id, e.status, e.occurred_at FROM app_instance_events e
		WHERE e.instance_id IN (SELECT id FROM app_instances WHERE status IN ('running', 'upgrading', 'rolling_back'))
		   OR e.instance_id IN (SELECT instance_id FROM app_instance_events WHERE occurred_at >= ?)
		ORDER BY e.instance_id, e.occurred_at, e.id`, ts(since))
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (InstanceStatusChange, error) {
		var c InstanceStatusChange
		return c, s.Scan(&c.InstanceID, &c.EventID, &c.Status, scanTime(&c.At))
	})
}
