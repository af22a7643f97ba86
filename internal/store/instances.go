package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/nodes"
)

var (
	_ instances.Tx      = (*Tx)(nil)
	_ instances.Queries = (*Queries)(nil)
)

// Instances is the instances domain's storage.
func Instances(db *DB) instances.Store { return NewPort[instances.Tx, instances.Queries](db) }

const appInstanceCols = `id, org_id, project_id, app_slug, display_name, version, digest, status, reason_code, reason_message,
	operating_mode, control_plane_scope, runtime_backend, tenant_boundary_mode, effective, target_allocation_id, node_id,
	service_account_id, host_port, deploy_seq, access, log_tail, history, current_operation_id, created_by, created_at,
	updated_at, decommissioned_at, gpu_uuids`

// appInstanceReadCols adds the health columns, which only
// UpdateAppInstanceHealth writes (new rows take their defaults).
const appInstanceReadCols = appInstanceCols + `, health, health_reason, health_changed_at, last_heartbeat_at,
	heartbeat_timeout_seconds, heartbeat_due_at, start_reported_seq`

func scanAppInstance(s interface{ Scan(...any) error }) (instances.AppInstance, error) {
	var i instances.AppInstance
	var gpus []byte
	err := s.Scan(&i.ID, &i.OrgID, &i.ProjectID, &i.AppSlug, &i.DisplayName, &i.Version, &i.Digest, (*string)(&i.Status), &i.ReasonCode, &i.ReasonMessage,
		&i.OperatingMode, &i.ControlPlaneScope, &i.RuntimeBackend, &i.TenantBoundaryMode, scanJSON(&i.Effective), &i.TargetAllocationID, &i.NodeID,
		&i.ServiceAccountID, &i.HostPort, &i.DeploySeq, scanJSON(&i.Access), scanJSON(&i.LogTail), scanJSON(&i.History), &i.CurrentOperationID,
		&i.CreatedBy, scanTime(&i.CreatedAt), scanTime(&i.UpdatedAt), scanTime(&i.DecommissionedAt), scanJSON(&gpus),
		(*string)(&i.Health.State), &i.Health.Reason, scanTime(&i.Health.ChangedAt), scanTime(&i.Health.LastHeartbeatAt),
		&i.Health.HeartbeatTimeoutSeconds, scanTime(&i.Health.HeartbeatDueAt), &i.Health.StartReportedSeq)
	if err == nil {
		i.GPUUUIDs, err = gpuList(gpus)
	}
	return i, err
}

// gpuList reads a gpu_uuids column: nil for none.
func gpuList(b []byte) ([]string, error) {
	var out []string
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// gpuText is the stored form of a GPU list ('[]' for none).
func gpuText(uuids []string) []byte {
	if len(uuids) == 0 {
		return []byte("[]")
	}
	b, _ := json.Marshal(uuids)
	return b
}

// InsertAppInstance writes a new instance.
func (q *Queries) InsertAppInstance(ctx context.Context, i instances.AppInstance) error {
	_, err := q.exec(ctx, `INSERT INTO app_instances (`+appInstanceCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		i.ID, i.OrgID, i.ProjectID, i.AppSlug, i.DisplayName, i.Version, i.Digest, string(i.Status), i.ReasonCode, i.ReasonMessage,
		i.OperatingMode, i.ControlPlaneScope, i.RuntimeBackend, i.TenantBoundaryMode, jsonText(i.Effective), i.TargetAllocationID, i.NodeID,
		i.ServiceAccountID, i.HostPort, i.DeploySeq, jsonText(i.Access), jsonText(i.LogTail), jsonText(orEmptyList(i.History)), i.CurrentOperationID,
		i.CreatedBy, ts(i.CreatedAt), ts(i.UpdatedAt), nullTS(i.DecommissionedAt), jsonText(gpuText(i.GPUUUIDs)))
	return err
}

// commaList scans a comma-joined text column into a list (nil when empty).
type commaList struct{ out *[]string }

func scanList(out *[]string) commaList { return commaList{out} }

func (c commaList) Scan(v any) error {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case []byte:
		s = string(x)
	case nil:
	default:
		return fmt.Errorf("comma list: unexpected %T", v)
	}
	*c.out = nil
	if s != "" {
		*c.out = strings.Split(s, ",")
	}
	return nil
}

func orEmptyList(b []byte) []byte {
	if len(b) == 0 {
		return []byte("[]")
	}
	return b
}

// UpdateAppInstance writes every mutable column of i, but only while the
// row still has status prevStatus: a concurrent transition makes it
// ErrNotFound.
func (q *Queries) UpdateAppInstance(ctx context.Context, i instances.AppInstance, prevStatus instances.InstanceStatus) error {
	return q.execOne(ctx, `UPDATE app_instances SET version = ?, digest = ?, status = ?, reason_code = ?, reason_message = ?,
		node_id = ?, service_account_id = ?, host_port = ?, deploy_seq = ?, access = ?, log_tail = ?, history = ?,
		current_operation_id = ?, updated_at = ?, decommissioned_at = ?, gpu_uuids = ? WHERE id = ? AND status = ?`,
		i.Version, i.Digest, string(i.Status), i.ReasonCode, i.ReasonMessage, i.NodeID, i.ServiceAccountID, i.HostPort, i.DeploySeq,
		jsonText(i.Access), jsonText(i.LogTail), jsonText(orEmptyList(i.History)), i.CurrentOperationID, ts(i.UpdatedAt),
		nullTS(i.DecommissionedAt), jsonText(gpuText(i.GPUUUIDs)), i.ID, string(prevStatus))
}

// GetAppInstance reads one instance of a project.
func (q *Queries) GetAppInstance(ctx context.Context, projectID, id string) (instances.AppInstance, error) {
	i, err := scanAppInstance(q.queryRow(ctx, `SELECT `+appInstanceReadCols+` FROM app_instances WHERE project_id = ? AND id = ?`, projectID, id))
	return i, scanOne(err)
}

// GetAppInstanceByID reads one instance whatever its project (workers).
func (q *Queries) GetAppInstanceByID(ctx context.Context, id string) (instances.AppInstance, error) {
	i, err := scanAppInstance(q.queryRow(ctx, `SELECT `+appInstanceReadCols+` FROM app_instances WHERE id = ?`, id))
	return i, scanOne(err)
}

// LockAppInstance reads an instance and, on PostgreSQL, holds its row lock
// until the transaction ends (SQLite transactions hold the database's write
// lock from BEGIN).
func (q *Queries) LockAppInstance(ctx context.Context, id string) (instances.AppInstance, error) {
	i, err := scanAppInstance(q.queryRow(ctx, `SELECT `+appInstanceReadCols+` FROM app_instances WHERE id = ?`+q.forUpdate(), id))
	return i, scanOne(err)
}

// UpdateAppInstanceHealth writes the health columns of one instance.
func (q *Queries) UpdateAppInstanceHealth(ctx context.Context, id string, h instances.Health) error {
	return q.execOne(ctx, `UPDATE app_instances SET health = ?, health_reason = ?, health_changed_at = ?, last_heartbeat_at = ?,
		heartbeat_timeout_seconds = ?, heartbeat_due_at = ?, start_reported_seq = ? WHERE id = ?`,
		string(h.State), h.Reason, nullTS(h.ChangedAt), nullTS(h.LastHeartbeatAt), h.HeartbeatTimeoutSeconds, nullTS(h.HeartbeatDueAt),
		h.StartReportedSeq, id)
}

// HeartbeatsOverdue lists running, not yet degraded instances whose
// heartbeat was due before now and whose timeout is at most
// maxTimeoutSeconds, earliest due first.
func (q *Queries) HeartbeatsOverdue(ctx context.Context, now time.Time, maxTimeoutSeconds, limit int) ([]instances.AppInstance, error) {
	rows, err := q.query(ctx, `SELECT `+appInstanceReadCols+` FROM app_instances WHERE heartbeat_due_at IS NOT NULL AND heartbeat_due_at < ?
		AND status = 'running' AND health <> 'degraded' AND heartbeat_timeout_seconds <= ? ORDER BY heartbeat_due_at, id LIMIT ?`,
		ts(now), maxTimeoutSeconds, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAppInstance)
}

// ListAppInstances lists a project's instances in creation order,
// optionally only those in status.
func (q *Queries) ListAppInstances(ctx context.Context, projectID string, status instances.InstanceStatus, p Page) ([]instances.AppInstance, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	// A project's instances, and the shared instances attached to it.
	query, args := `SELECT `+appInstanceReadCols+` FROM app_instances
		WHERE (project_id = ? OR id IN (SELECT instance_id FROM app_instance_attachments WHERE project_id = ?)) AND id > ?`, []any{projectID, projectID, after}
	if status != "" {
		query += ` AND status = ?`
		args = append(args, string(status))
	}
	rows, err := q.query(ctx, query+` ORDER BY id`+limitClause(limit), args...)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanAppInstance)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(i instances.AppInstance) string { return i.ID })
	return out, next, nil
}

// liveInstance is the condition of an instance that still holds (or may
// hold) a workload: everything but decommissioned.
const liveInstance = `status <> 'decommissioned'`

// CountLiveInstancesOfVersion counts live instances running an app version
// or on their way to it: a launch, upgrade or rollback to it still in
// progress counts, since it ends with the instance running that version.
func (q *Queries) CountLiveInstancesOfVersion(ctx context.Context, appSlug, version string) (int, error) {
	var n int
	err := q.queryRow(ctx, `SELECT COUNT(*) FROM app_instances i WHERE i.app_slug = ? AND i.`+liveInstance+` AND (i.version = ? OR EXISTS (
		SELECT 1 FROM app_instance_operations o WHERE o.id = i.current_operation_id AND o.state = 'in_progress' AND o.target_version = ?))`,
		appSlug, version, version).Scan(&n)
	return n, mapErr(err)
}

// CountLiveInstancesUsingDigest counts live instances of app appSlug that
// run digest in any of their members, or whose current version is pinned
// to it.
func (q *Queries) CountLiveInstancesUsingDigest(ctx context.Context, appSlug, digest string) (int, error) {
	var n int
	err := q.queryRow(ctx, `SELECT COUNT(*) FROM app_instances i WHERE i.app_slug = ? AND i.`+liveInstance+` AND (i.digest = ? OR EXISTS (
		SELECT 1 FROM app_instance_members m WHERE m.instance_id = i.id AND m.digest = ? AND m.status <> 'removed'))`, appSlug, digest, digest).Scan(&n)
	return n, mapErr(err)
}

// LiveInstancesOn lists the live instances placed on an allocation (when
// allocationID is set) or a node (when nodeID is set).
func (q *Queries) LiveInstancesOn(ctx context.Context, allocationID, nodeID string) ([]instances.AppInstance, error) {
	query, arg := `SELECT `+appInstanceReadCols+` FROM app_instances WHERE target_allocation_id = ?`, allocationID
	if allocationID == "" {
		query, arg = `SELECT `+appInstanceReadCols+` FROM app_instances WHERE node_id = ?`, nodeID
	}
	rows, err := q.query(ctx, query+` AND `+liveInstance+` ORDER BY id`, arg)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAppInstance)
}

// HostPortsHeld maps the host ports held on a node by live instances to
// the instance holding each.
func (q *Queries) HostPortsHeld(ctx context.Context, nodeID string) (map[int]string, error) {
	rows, err := q.query(ctx, `SELECT host_port, id FROM app_instances WHERE node_id = ? AND host_port > 0 AND `+liveInstance+` ORDER BY id`, nodeID)
	if err != nil {
		return nil, err
	}
	type held struct {
		port int
		id   string
	}
	list, err := collect(rows, func(s interface{ Scan(...any) error }) (held, error) {
		var h held
		return h, s.Scan(&h.port, &h.id)
	})
	if err != nil {
		return nil, err
	}
	out := make(map[int]string, len(list))
	for _, h := range list {
		if _, ok := out[h.port]; !ok {
			out[h.port] = h.id
		}
	}
	return out, nil
}

// placementLockClass is the first key of the PostgreSQL advisory locks
// LockPlacement takes (the second is the node); the two-key form keeps them
// apart from the one-key lock schema changes hold.
const placementLockClass = 0x67707561 // "gpua"

// LockPlacement holds the placement of instances on a node until the
// transaction ends: two launches (or deployments, or member additions)
// onto one node choose their GPUs and host ports one after the other, each
// seeing what the other took. On PostgreSQL it is a transaction-scoped
// advisory lock, not a row lock, so it waits only on other placements and
// never on a node's heartbeat or an allocation's release. SQLite holds the
// whole database for a mutation already.
func (q *Queries) LockPlacement(ctx context.Context, nodeID string) error {
	if q.d != Postgres {
		return nil
	}
	_, err := q.exec(ctx, `SELECT pg_advisory_xact_lock(`+strconv.Itoa(placementLockClass)+`, hashtext(?))`, nodeID)
	return err
}

const instanceOperationCols = `id, instance_id, org_id, project_id, kind, state, phase, from_version, target_version, description,
	reason_code, task_id, correlation_id, actor, lease_owner, lease_expires_at, created_at, updated_at, completed_at, member_ids,
	executor, app_slug, lease_id, attempt, deadline_at, progress, worker_state`

func scanInstanceOperation(s interface{ Scan(...any) error }) (instances.InstanceOperation, error) {
	var o instances.InstanceOperation
	err := s.Scan(&o.ID, &o.InstanceID, &o.OrgID, &o.ProjectID, (*string)(&o.Kind), (*string)(&o.State), (*string)(&o.Phase), &o.FromVersion, &o.TargetVersion, &o.Description,
		&o.ReasonCode, &o.TaskID, &o.CorrelationID, &o.Actor, &o.LeaseOwner, scanTime(&o.LeaseExpiresAt), scanTime(&o.CreatedAt),
		scanTime(&o.UpdatedAt), scanTime(&o.CompletedAt), scanList(&o.MemberIDs),
		&o.Executor, &o.AppSlug, &o.LeaseID, &o.Attempt, scanTime(&o.DeadlineAt), &o.Progress, scanJSON(&o.WorkerState))
	return o, err
}

// InsertInstanceOperation writes a new operation.
func (q *Queries) InsertInstanceOperation(ctx context.Context, o instances.InstanceOperation) error {
	_, err := q.exec(ctx, `INSERT INTO app_instance_operations (`+instanceOperationCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		o.ID, o.InstanceID, o.OrgID, o.ProjectID, string(o.Kind), string(o.State), string(o.Phase), o.FromVersion, o.TargetVersion, o.Description,
		o.ReasonCode, o.TaskID, o.CorrelationID, o.Actor, o.LeaseOwner, nullTS(o.LeaseExpiresAt), ts(o.CreatedAt), ts(o.UpdatedAt), nullTS(o.CompletedAt),
		strings.Join(o.MemberIDs, ","), executorOf(o), o.AppSlug, o.LeaseID, o.Attempt, nullTS(o.DeadlineAt), o.Progress, jsonText(o.WorkerState))
	return err
}

// UpdateInstanceOperation writes the progress of o, but only while the row
// is still in_progress at phase prevPhase: two drivers can never both
// advance one step.
func (q *Queries) UpdateInstanceOperation(ctx context.Context, o instances.InstanceOperation, prevPhase instances.OperationPhase) error {
	return q.execOne(ctx, `UPDATE app_instance_operations SET state = ?, phase = ?, description = ?, reason_code = ?, task_id = ?,
		updated_at = ?, completed_at = ?, progress = ?, worker_state = ? WHERE id = ? AND state = 'in_progress' AND phase = ?`,
		string(o.State), string(o.Phase), o.Description, o.ReasonCode, o.TaskID, ts(o.UpdatedAt), nullTS(o.CompletedAt),
		o.Progress, jsonText(o.WorkerState), o.ID, string(prevPhase))
}

func executorOf(o instances.InstanceOperation) string {
	if o.Executor == "" {
		return instances.ExecutorPlatform
	}
	return o.Executor
}

const workerOps = `FROM app_instance_operations WHERE app_slug = ? AND executor = 'worker' AND state = 'in_progress'`

// HeldWorkerOperation returns the in-progress operation of an app whose
// unexpired lease owner holds; ErrNotFound when none.
func (q *Queries) HeldWorkerOperation(ctx context.Context, appSlug, owner string, now time.Time) (instances.InstanceOperation, error) {
	o, err := scanInstanceOperation(q.queryRow(ctx, `SELECT `+instanceOperationCols+` `+workerOps+`
		AND lease_owner = ? AND lease_expires_at >= ? ORDER BY id LIMIT 1`, appSlug, owner, ts(now)))
	return o, scanOne(err)
}

// GetWorkerOperation reads one worker operation of an app; ErrNotFound
// when the app has none of that id.
func (q *Queries) GetWorkerOperation(ctx context.Context, appSlug, id string) (instances.InstanceOperation, error) {
	o, err := scanInstanceOperation(q.queryRow(ctx, `SELECT `+instanceOperationCols+` FROM app_instance_operations
		WHERE id = ? AND app_slug = ? AND executor = 'worker'`, id, appSlug))
	return o, scanOne(err)
}

// AvailableWorkerOperations lists an app's in-progress worker operations
// whose lease is free or expired at now, oldest first.
func (q *Queries) AvailableWorkerOperations(ctx context.Context, appSlug string, now time.Time, limit int) ([]instances.InstanceOperation, error) {
	rows, err := q.query(ctx, `SELECT `+instanceOperationCols+` `+workerOps+`
		AND (lease_expires_at IS NULL OR lease_expires_at < ?) ORDER BY id LIMIT ?`, appSlug, ts(now), limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanInstanceOperation)
}

// LeaseWorkerOperation gives a worker operation a new lease when its lease
// is free or expired at now; false when another worker holds it.
func (q *Queries) LeaseWorkerOperation(ctx context.Context, id, owner, leaseID string, now, until time.Time) (bool, error) {
	res, err := q.exec(ctx, `UPDATE app_instance_operations SET lease_owner = ?, lease_id = ?, lease_expires_at = ?, attempt = attempt + 1
		WHERE id = ? AND executor = 'worker' AND state = 'in_progress' AND (lease_expires_at IS NULL OR lease_expires_at < ?)`,
		owner, leaseID, ts(until), id, ts(now))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, mapErr(err)
}

// ExtendWorkerLease moves the expiry of lease leaseID on an in-progress
// worker operation and records the worker's progress message; false when
// the operation is not in progress under that lease.
func (q *Queries) ExtendWorkerLease(ctx context.Context, id, leaseID string, until time.Time, progress string) (bool, error) {
	res, err := q.exec(ctx, `UPDATE app_instance_operations SET lease_expires_at = ?, progress = ?
		WHERE id = ? AND lease_id = ? AND executor = 'worker' AND state = 'in_progress'`, ts(until), progress, id, leaseID)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, mapErr(err)
}

// OverdueWorkerOperations lists in-progress worker operations past their
// deadline at now, oldest first.
func (q *Queries) OverdueWorkerOperations(ctx context.Context, now time.Time, limit int) ([]instances.InstanceOperation, error) {
	rows, err := q.query(ctx, `SELECT `+instanceOperationCols+` FROM app_instance_operations
		WHERE executor = 'worker' AND state = 'in_progress' AND deadline_at < ? ORDER BY id LIMIT ?`, ts(now), limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanInstanceOperation)
}

// LastWorkerState returns the state the worker left on the newest
// operation of an instance that kept one (nil when none did).
func (q *Queries) LastWorkerState(ctx context.Context, instanceID string) ([]byte, error) {
	var b []byte
	err := q.queryRow(ctx, `SELECT worker_state FROM app_instance_operations WHERE instance_id = ? AND worker_state IS NOT NULL
		ORDER BY id DESC LIMIT 1`, instanceID).Scan(scanJSON(&b))
	if err = scanOne(err); errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return b, err
}

const workerGrantCols = `app_slug, service_account_id, project_id, granted_by, created_at`

func scanWorkerGrant(s interface{ Scan(...any) error }) (instances.AppWorkerGrant, error) {
	var g instances.AppWorkerGrant
	err := s.Scan(&g.AppSlug, &g.ServiceAccountID, &g.ProjectID, &g.GrantedBy, scanTime(&g.CreatedAt))
	return g, err
}

// PutAppWorkerGrant grants a service account an app's worker operations;
// ErrAlreadyExists when it holds the grant.
func (q *Queries) PutAppWorkerGrant(ctx context.Context, g instances.AppWorkerGrant) error {
	_, err := q.exec(ctx, `INSERT INTO app_worker_grants (`+workerGrantCols+`) VALUES (?, ?, ?, ?, ?)`,
		g.AppSlug, g.ServiceAccountID, g.ProjectID, g.GrantedBy, ts(g.CreatedAt))
	return err
}

// GetAppWorkerGrant reads one grant; ErrNotFound when there is none.
func (q *Queries) GetAppWorkerGrant(ctx context.Context, appSlug, serviceAccountID string) (instances.AppWorkerGrant, error) {
	g, err := scanWorkerGrant(q.queryRow(ctx, `SELECT `+workerGrantCols+` FROM app_worker_grants WHERE app_slug = ? AND service_account_id = ?`,
		appSlug, serviceAccountID))
	return g, scanOne(err)
}

// DeleteAppWorkerGrant removes a grant; ErrNotFound when there is none.
func (q *Queries) DeleteAppWorkerGrant(ctx context.Context, appSlug, serviceAccountID string) error {
	return q.execOne(ctx, `DELETE FROM app_worker_grants WHERE app_slug = ? AND service_account_id = ?`, appSlug, serviceAccountID)
}

// ListAppWorkerGrants pages through an app's worker grants by account id.
func (q *Queries) ListAppWorkerGrants(ctx context.Context, appSlug string, p Page) ([]instances.AppWorkerGrant, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+workerGrantCols+` FROM app_worker_grants WHERE app_slug = ? AND service_account_id > ?
		ORDER BY service_account_id`+limitClause(limit), appSlug, after)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanWorkerGrant)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(g instances.AppWorkerGrant) string { return g.ServiceAccountID })
	return out, next, nil
}

// GetInstanceOperation reads one operation of a project.
func (q *Queries) GetInstanceOperation(ctx context.Context, projectID, id string) (instances.InstanceOperation, error) {
	o, err := scanInstanceOperation(q.queryRow(ctx, `SELECT `+instanceOperationCols+` FROM app_instance_operations WHERE project_id = ? AND id = ?`, projectID, id))
	return o, scanOne(err)
}

// OpenInstanceOperations lists in-progress operations whose lease is free
// or expired at now, oldest first.
func (q *Queries) OpenInstanceOperations(ctx context.Context, now time.Time, limit int) ([]instances.InstanceOperation, error) {
	rows, err := q.query(ctx, `SELECT `+instanceOperationCols+` FROM app_instance_operations
		WHERE state = 'in_progress' AND executor = 'platform' AND (lease_expires_at IS NULL OR lease_expires_at < ?) ORDER BY id LIMIT ?`, ts(now), limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanInstanceOperation)
}

// LeaseInstanceOperation takes the lease of an in-progress operation for
// owner until until, if it is free or expired at now (or already owner's).
// It reports whether the lease was taken.
func (q *Queries) LeaseInstanceOperation(ctx context.Context, id, owner string, now, until time.Time) (bool, error) {
	res, err := q.exec(ctx, `UPDATE app_instance_operations SET lease_owner = ?, lease_expires_at = ?
		WHERE id = ? AND state = 'in_progress' AND (lease_expires_at IS NULL OR lease_expires_at < ? OR lease_owner = ?)`,
		owner, ts(until), id, ts(now), owner)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, mapErr(err)
}

// ReleaseInstanceOperation gives a lease back so the next pass may drive it.
func (q *Queries) ReleaseInstanceOperation(ctx context.Context, id, owner string) error {
	_, err := q.exec(ctx, `UPDATE app_instance_operations SET lease_owner = '', lease_expires_at = NULL WHERE id = ? AND lease_owner = ?`, id, owner)
	return err
}

const instanceEventCols = `id, instance_id, project_id, event_type, status, operation_id, correlation_id, payload, occurred_at, dedupe_key`

func scanInstanceEvent(s interface{ Scan(...any) error }) (instances.InstanceEvent, error) {
	var e instances.InstanceEvent
	err := s.Scan(&e.ID, &e.InstanceID, &e.ProjectID, &e.EventType, (*string)(&e.Status), &e.OperationID, &e.CorrelationID, scanJSON(&e.Payload), scanTime(&e.OccurredAt), &e.DedupeKey)
	return e, err
}

// InsertInstanceEvent appends to an instance's timeline.
func (q *Queries) InsertInstanceEvent(ctx context.Context, e instances.InstanceEvent) error {
	_, err := q.exec(ctx, `INSERT INTO app_instance_events (`+instanceEventCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.ID, e.InstanceID, e.ProjectID, e.EventType, string(e.Status), e.OperationID, e.CorrelationID, jsonText(e.Payload), ts(e.OccurredAt), e.DedupeKey)
	return err
}

// reportedInsertChunk bounds the rows of one multi-row INSERT (10
// parameters each, far below either dialect's limit).
const reportedInsertChunk = 200

// InsertReportedInstanceEvents appends timeline rows, skipping every row
// whose dedupe key exists (or came earlier in events); it returns the ids
// of the rows it wrote. Rows go in dedupe-key order, so two concurrent
// posts take their keys in one order and never deadlock.
func (q *Queries) InsertReportedInstanceEvents(ctx context.Context, events []instances.InstanceEvent) (map[string]bool, error) {
	events = slices.Clone(events)
	slices.SortStableFunc(events, func(a, b instances.InstanceEvent) int { return strings.Compare(a.DedupeKey, b.DedupeKey) })
	stored := make(map[string]bool, len(events))
	for start := 0; start < len(events); start += reportedInsertChunk {
		chunk := events[start:min(start+reportedInsertChunk, len(events))]
		var sql strings.Builder
		sql.WriteString(`INSERT INTO app_instance_events (` + instanceEventCols + `) VALUES `)
		args := make([]any, 0, 10*len(chunk))
		ids := make([]string, len(chunk))
		for i, e := range chunk {
			if e.DedupeKey == "" {
				return nil, fmt.Errorf("store: a reported instance event needs a dedupe key")
			}
			if i > 0 {
				sql.WriteString(", ")
			}
			sql.WriteString(`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
			args = append(args, e.ID, e.InstanceID, e.ProjectID, e.EventType, string(e.Status), e.OperationID, e.CorrelationID,
				jsonText(e.Payload), ts(e.OccurredAt), e.DedupeKey)
			ids[i] = e.ID
		}
		if err := q.insertSkippingConflicts(ctx, sql.String()+` ON CONFLICT DO NOTHING`, args, "app_instance_events", ids, stored); err != nil {
			return nil, err
		}
	}
	return stored, nil
}

// ReportedEventKeyOwners returns the instance of the timeline row stored
// under each of keys that one is stored under.
func (q *Queries) ReportedEventKeyOwners(ctx context.Context, keys []string) (map[string]string, error) {
	return q.keyOwners(ctx, "app_instance_events", "instance_id", keys)
}

// InstancesOverReportedCap lists up to limit instances holding more than
// keep runtime-reported timeline rows, among those with one from since on
// (all when since is empty); it reads the partial index
// app_instance_events_reported (migration 0034), and the primary key for
// the ids from since on.
func (q *Queries) InstancesOverReportedCap(ctx context.Context, keep, limit int, since string) ([]string, error) {
	where, args := "", []any{}
	if since != "" {
		where = ` AND instance_id IN (SELECT DISTINCT instance_id FROM app_instance_events WHERE id >= ? AND dedupe_key <> '')`
		args = append(args, since)
	}
	rows, err := q.query(ctx, `SELECT instance_id FROM app_instance_events WHERE dedupe_key <> ''`+where+`
		GROUP BY instance_id HAVING COUNT(*) > ? ORDER BY instance_id LIMIT ?`, append(args, keep, limit)...)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (string, error) {
		var id string
		return id, s.Scan(&id)
	})
}

// NewestReportedEventID returns the highest runtime-reported row id, or "".
func (q *Queries) NewestReportedEventID(ctx context.Context) (string, error) {
	var id string
	err := q.queryRow(ctx, `SELECT COALESCE(MAX(id), '') FROM app_instance_events WHERE dedupe_key <> ''`).Scan(&id)
	return id, mapErr(err)
}

// PruneReportedInstanceEvents deletes up to batch of an instance's
// runtime-reported rows older than its keep newest (ids are UUIDv7, so id
// order is the order they were recorded in, the timeline's order).
func (q *Queries) PruneReportedInstanceEvents(ctx context.Context, instanceID string, keep, batch int) (int64, error) {
	res, err := q.exec(ctx, `DELETE FROM app_instance_events WHERE id IN (
		SELECT id FROM app_instance_events WHERE instance_id = ? AND dedupe_key <> '' AND id <= (
			SELECT id FROM app_instance_events WHERE instance_id = ? AND dedupe_key <> '' ORDER BY id DESC LIMIT 1 OFFSET ?)
		ORDER BY id LIMIT ?)`, instanceID, instanceID, keep, batch)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// ListInstanceEvents pages through an instance's timeline, oldest first.
func (q *Queries) ListInstanceEvents(ctx context.Context, instanceID string, p Page) ([]instances.InstanceEvent, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+instanceEventCols+` FROM app_instance_events WHERE instance_id = ? AND id > ? ORDER BY id`+limitClause(limit), instanceID, after)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanInstanceEvent)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(e instances.InstanceEvent) string { return e.ID })
	return out, next, nil
}

const instanceMemberCols = `id, instance_id, allocation_id, node_id, role, status, version, digest, workload_name, container_ids, created_at, updated_at,
	name, added, reason_code, reason_message, task_id, key_id, gpu_uuids`

func scanInstanceMember(s interface{ Scan(...any) error }) (instances.InstanceMember, error) {
	var m instances.InstanceMember
	var gpus []byte
	var added int
	err := s.Scan(&m.ID, &m.InstanceID, &m.AllocationID, &m.NodeID, &m.Role, (*string)(&m.Status), &m.Version, &m.Digest, &m.WorkloadName,
		scanJSON(&m.ContainerIDs), scanTime(&m.CreatedAt), scanTime(&m.UpdatedAt),
		&m.Name, &added, &m.ReasonCode, &m.ReasonMessage, &m.TaskID, &m.KeyID, scanJSON(&gpus))
	m.Added = added == 1
	if err == nil {
		m.GPUUUIDs, err = gpuList(gpus)
	}
	return m, err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// InsertInstanceMember records a workload of an instance.
func (q *Queries) InsertInstanceMember(ctx context.Context, m instances.InstanceMember) error {
	_, err := q.exec(ctx, `INSERT INTO app_instance_members (`+instanceMemberCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		m.ID, m.InstanceID, m.AllocationID, m.NodeID, m.Role, string(m.Status), m.Version, m.Digest, m.WorkloadName,
		jsonText(orEmptyList(m.ContainerIDs)), ts(m.CreatedAt), ts(m.UpdatedAt),
		m.Name, boolInt(m.Added), m.ReasonCode, m.ReasonMessage, m.TaskID, m.KeyID, jsonText(gpuText(m.GPUUUIDs)))
	return err
}

// UpdateInstanceMember writes one member's state, deployment and reason.
func (q *Queries) UpdateInstanceMember(ctx context.Context, m instances.InstanceMember) error {
	return q.execOne(ctx, `UPDATE app_instance_members SET status = ?, version = ?, digest = ?, workload_name = ?, container_ids = ?,
		reason_code = ?, reason_message = ?, task_id = ?, key_id = ?, gpu_uuids = ?, updated_at = ? WHERE instance_id = ? AND id = ?`,
		string(m.Status), m.Version, m.Digest, m.WorkloadName, jsonText(orEmptyList(m.ContainerIDs)), m.ReasonCode, m.ReasonMessage,
		m.TaskID, m.KeyID, jsonText(gpuText(m.GPUUUIDs)), ts(m.UpdatedAt), m.InstanceID, m.ID)
}

// GetInstanceMember reads one member of an instance.
func (q *Queries) GetInstanceMember(ctx context.Context, instanceID, id string) (instances.InstanceMember, error) {
	m, err := scanInstanceMember(q.queryRow(ctx, `SELECT `+instanceMemberCols+` FROM app_instance_members WHERE instance_id = ? AND id = ?`, instanceID, id))
	return m, scanOne(err)
}

// AddedMembersOn lists the added members not yet removed that run on a
// node (or, with an empty node id, on an allocation), oldest first.
func (q *Queries) AddedMembersOn(ctx context.Context, allocationID, nodeID string) ([]instances.InstanceMember, error) {
	query, arg := `SELECT `+instanceMemberCols+` FROM app_instance_members WHERE node_id = ?`, nodeID
	if nodeID == "" {
		query, arg = `SELECT `+instanceMemberCols+` FROM app_instance_members WHERE allocation_id = ?`, allocationID
	}
	rows, err := q.query(ctx, query+` AND added = 1 AND status <> 'removed' ORDER BY id`, arg)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanInstanceMember)
}

// RunningMemberReports lists the running added members on ready or
// draining nodes with their node's stored workload report and their
// instance's runtime backend, ordered by node then member: one query for
// what was a node list and a query per node.
func (q *Queries) RunningMemberReports(ctx context.Context) ([]instances.MemberReport, error) {
	rows, err := q.query(ctx, `SELECT `+prefixed("m.", instanceMemberCols)+`, i.runtime_backend, n.last_heartbeat_at, n.workloads
		FROM app_instance_members m
		JOIN nodes n ON n.id = m.node_id
		JOIN app_instances i ON i.id = m.instance_id
		WHERE m.added = 1 AND m.status = ? AND n.state IN (?, ?)
		ORDER BY m.node_id, m.id`, string(instances.MemberRunning), string(nodes.StateReady), string(nodes.StateDraining))
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (instances.MemberReport, error) {
		var r instances.MemberReport
		m, err := scanInstanceMember(memberReportScanner{s, &r})
		r.Member = m
		return r, err
	})
}

// memberReportScanner scans a RunningMemberReports row: the member's
// columns through scanInstanceMember, the three after them into r.
type memberReportScanner struct {
	s interface{ Scan(...any) error }
	r *instances.MemberReport
}

func (m memberReportScanner) Scan(dest ...any) error {
	return m.s.Scan(append(dest, &m.r.Backend, scanTime(&m.r.ReportedAt), scanJSON(&m.r.Workloads))...)
}

// SetInstanceMembersStatus moves the members of one workload (or, with an
// empty workload name, every member not yet removed) to status.
func (q *Queries) SetInstanceMembersStatus(ctx context.Context, instanceID, workloadName string, status instances.MemberStatus, containerIDs []byte, now time.Time) error {
	query, args := `UPDATE app_instance_members SET status = ?, updated_at = ?`, []any{string(status), ts(now)}
	if containerIDs != nil {
		query += `, container_ids = ?`
		args = append(args, jsonText(containerIDs))
	}
	query += ` WHERE instance_id = ? AND status <> 'removed'`
	args = append(args, instanceID)
	if workloadName != "" {
		query += ` AND workload_name = ?`
		args = append(args, workloadName)
	}
	_, err := q.exec(ctx, query, args...)
	return err
}

// ListInstanceMembers lists an instance's members, oldest first.
func (q *Queries) ListInstanceMembers(ctx context.Context, instanceID string, p Page) ([]instances.InstanceMember, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+instanceMemberCols+` FROM app_instance_members WHERE instance_id = ? AND id > ? ORDER BY id`+limitClause(limit), instanceID, after)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanInstanceMember)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(m instances.InstanceMember) string { return m.ID })
	return out, next, nil
}

// AppArtifactsOfVersion lists every artifact registered for an app version
// in any project, revoked ones included (a launch must tell "revoked" from
// "not ready").
func (q *Queries) AppArtifactsOfVersion(ctx context.Context, appSlug, appVersion string) ([]artifacts.AppArtifact, error) {
	rows, err := q.query(ctx, `SELECT `+appArtifactCols+` FROM app_artifacts WHERE app_slug = ? AND app_version = ? ORDER BY id`, appSlug, appVersion)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAppArtifact)
}

const attachmentCols = `instance_id, project_id, org_id, attached_by, created_at`

func scanAttachment(s interface{ Scan(...any) error }) (instances.Attachment, error) {
	var a instances.Attachment
	err := s.Scan(&a.InstanceID, &a.ProjectID, &a.OrgID, &a.AttachedBy, scanTime(&a.CreatedAt))
	return a, err
}

// InsertInstanceAttachment attaches a project to an instance;
// ErrAlreadyExists when it is attached.
func (q *Queries) InsertInstanceAttachment(ctx context.Context, a instances.Attachment) error {
	_, err := q.exec(ctx, `INSERT INTO app_instance_attachments (`+attachmentCols+`) VALUES (?, ?, ?, ?, ?)`,
		a.InstanceID, a.ProjectID, a.OrgID, a.AttachedBy, ts(a.CreatedAt))
	return err
}

// DeleteInstanceAttachment detaches a project; ErrNotFound when it was not
// attached.
func (q *Queries) DeleteInstanceAttachment(ctx context.Context, instanceID, projectID string) error {
	return q.execOne(ctx, `DELETE FROM app_instance_attachments WHERE instance_id = ? AND project_id = ?`, instanceID, projectID)
}

// ListInstanceAttachments lists the projects attached to an instance.
func (q *Queries) ListInstanceAttachments(ctx context.Context, instanceID string) ([]instances.Attachment, error) {
	rows, err := q.query(ctx, `SELECT `+attachmentCols+` FROM app_instance_attachments WHERE instance_id = ? ORDER BY project_id`, instanceID)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAttachment)
}

// InstanceAttached reports whether a project is attached to an instance.
func (q *Queries) InstanceAttached(ctx context.Context, instanceID, projectID string) (bool, error) {
	var n int
	err := q.queryRow(ctx, `SELECT COUNT(*) FROM app_instance_attachments WHERE instance_id = ? AND project_id = ?`, instanceID, projectID).Scan(&n)
	return n > 0, mapErr(err)
}
