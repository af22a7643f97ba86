package store

import (
	"context"
	"errors"
	"time"

	"github.com/gpuaas/gpuaas/internal/billing"
)

// Billing's reads of the nodes domain's tables (allocations, issue 11).

// allocationIntervalsSinceQuery reads the intervals open or ended at or
// after its argument through allocation_intervals_ended (a BitmapOr of
// its two conditions on PostgreSQL), not a scan of every interval.
const allocationIntervalsSinceQuery = `SELECT id, allocation_id, org_id, project_id, sku, gpu_count, started_at, ended_at FROM allocation_intervals
		WHERE ended_at IS NULL OR ended_at >= ? ORDER BY started_at, id`

// AllocationIntervalsSince lists the allocation intervals of every project
// that are still open or ended at or after since: what the metering worker
// may still have to record.
func (q *Queries) AllocationIntervalsSince(ctx context.Context, since time.Time) ([]billing.AllocationInterval, error) {
	rows, err := q.query(ctx, allocationIntervalsSinceQuery, ts(since))
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (billing.AllocationInterval, error) {
		var i billing.AllocationInterval
		err := s.Scan(&i.ID, &i.AllocationID, &i.OrgID, &i.ProjectID, &i.SKU, &i.GPUCount, scanTime(&i.Start), scanTime(&i.End))
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

// instanceStatusChangesQuery picks the instances first (one list of ids:
// two IN lists joined by OR made both dialects scan every timeline row,
// and a UNION made SQLite scan them in id order to merge) and reads their
// timelines through app_instance_events_instance; the recently changed
// ones are found through app_instance_events_occurred. Only the
// platform's own rows (no dedupe key) say when the status changed: a row
// recorded from a workload's runtime event carries the status at the
// report but the time the workload gave (up to minutes ahead, a day
// behind), and read as a change it let a workload close its own running
// interval early, with a "deploying" report dated past the platform's
// "running".
const instanceStatusChangesQuery = `SELECT e.instance_id, e.id, e.status, e.occurred_at FROM app_instance_events e
		WHERE e.instance_id IN (SELECT id FROM app_instances WHERE status IN ('running', 'upgrading', 'rolling_back')
			UNION ALL SELECT instance_id FROM app_instance_events WHERE occurred_at >= ?)
		AND e.dedupe_key = ''
		ORDER BY e.instance_id, e.occurred_at, e.id`

// InstanceStatusChanges returns the timelines, oldest first per instance,
// of every instance that is serving now (running, upgrading, rolling back)
// or that changed status at or after since: everything whose running time
// the metering worker may still have to record.
func (q *Queries) InstanceStatusChanges(ctx context.Context, since time.Time) ([]billing.InstanceStatusChange, error) {
	rows, err := q.query(ctx, instanceStatusChangesQuery, ts(since))
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (billing.InstanceStatusChange, error) {
		var (
			c      billing.InstanceStatusChange
			status string
		)
		err := s.Scan(&c.InstanceID, &c.EventID, &status, scanTime(&c.At))
		c.Status = billing.InstanceStatus(status)
		return c, err
	})
}

// InstanceForBilling reads what billing needs of an app instance: its
// attribution and workload identity, and its version's manifest (nil when
// the version is gone).
func (q *Queries) InstanceForBilling(ctx context.Context, instanceID string) (billing.InstanceRecord, error) {
	inst, err := q.GetAppInstanceByID(ctx, instanceID)
	if err != nil {
		return billing.InstanceRecord{}, err
	}
	out := billing.InstanceRecord{Instance: billing.Instance{ID: inst.ID, OrgID: inst.OrgID, ProjectID: inst.ProjectID,
		AppSlug: inst.AppSlug, Version: inst.Version, OperatingMode: inst.OperatingMode, ControlPlaneScope: inst.ControlPlaneScope,
		RuntimeBackend: inst.RuntimeBackend, ServiceAccountID: inst.ServiceAccountID}}
	v, err := q.GetAppVersion(ctx, inst.AppSlug, inst.Version)
	if errors.Is(err, ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return billing.InstanceRecord{}, err
	}
	out.Manifest = v.Manifest
	return out, nil
}

// AttachedProjectOrg returns the org of a project attached to an instance
// (app_instance_attachments); ErrNotFound when it is not attached.
func (q *Queries) AttachedProjectOrg(ctx context.Context, instanceID, projectID string) (string, error) {
	var org string
	err := q.queryRow(ctx, `SELECT org_id FROM app_instance_attachments WHERE instance_id = ? AND project_id = ?`, instanceID, projectID).Scan(&org)
	return org, scanOne(err)
}
