package store

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/nodes"
)

const nodeTaskCols = `id, node_id, kind, instance_id, project_id, payload, state, attempt, lease_expires_at, reason_code, message, result,
	created_at, updated_at, completed_at`

func scanNodeTask(s interface{ Scan(...any) error }) (nodes.NodeTask, error) {
	var t nodes.NodeTask
	err := s.Scan(&t.ID, &t.NodeID, &t.Kind, &t.InstanceID, &t.ProjectID, &t.Payload, (*string)(&t.State), &t.Attempt, scanTime(&t.LeaseExpiresAt),
		&t.ReasonCode, &t.Message, scanJSON(&t.Result), scanTime(&t.CreatedAt), scanTime(&t.UpdatedAt), scanTime(&t.CompletedAt))
	return t, err
}

func (q *Queries) InsertNodeTask(ctx context.Context, t nodes.NodeTask) error {
	_, err := q.exec(ctx, `INSERT INTO node_tasks (id, node_id, kind, instance_id, project_id, payload, state, attempt, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?)`, t.ID, t.NodeID, t.Kind, t.InstanceID, t.ProjectID, t.Payload, string(nodes.TaskQueued), ts(t.CreatedAt), ts(t.UpdatedAt))
	return err
}

func (q *Queries) GetNodeTask(ctx context.Context, id string) (nodes.NodeTask, error) {
	t, err := scanNodeTask(q.queryRow(ctx, `SELECT `+nodeTaskCols+` FROM node_tasks WHERE id = ?`, id))
	return t, scanOne(err)
}

// DeliverableNodeTasks lists a node's tasks that are queued or whose lease
// ran out, oldest first.
func (q *Queries) DeliverableNodeTasks(ctx context.Context, nodeID string, now time.Time, limit int) ([]nodes.NodeTask, error) {
	rows, err := q.query(ctx, `SELECT `+nodeTaskCols+` FROM node_tasks WHERE node_id = ?
		AND (state = 'queued' OR (state = 'leased' AND lease_expires_at < ?)) ORDER BY id LIMIT ?`, nodeID, ts(now), limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanNodeTask)
}

// LeaseNodeTask leases a deliverable task until expires; ErrNotFound means
// another poll leased it first.
func (q *Queries) LeaseNodeTask(ctx context.Context, id string, now, expires time.Time) error {
	return q.execOne(ctx, `UPDATE node_tasks SET state = 'leased', attempt = attempt + 1, lease_expires_at = ?, updated_at = ?
		WHERE id = ? AND (state = 'queued' OR (state = 'leased' AND lease_expires_at < ?))`, ts(expires), ts(now), id, ts(now))
}

// CompleteNodeTask records a task's result once; ErrNotFound means it was
// already complete.
func (q *Queries) CompleteNodeTask(ctx context.Context, id string, state nodes.TaskState, reason, message string, result []byte, at time.Time) error {
	return q.execOne(ctx, `UPDATE node_tasks SET state = ?, reason_code = ?, message = ?, result = ?, completed_at = ?, updated_at = ?, lease_expires_at = NULL
		WHERE id = ? AND state IN ('queued', 'leased')`, string(state), reason, message, jsonText(result), ts(at), ts(at), id)
}

// ListNodeTasks lists tasks in creation order.
func (q *Queries) ListNodeTasks(ctx context.Context, f nodes.NodeTaskFilter, p Page) ([]nodes.NodeTask, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+nodeTaskCols+` FROM node_tasks WHERE id > ?
		AND (? = '' OR node_id = ?) AND (? = '' OR instance_id = ?) AND (? = '' OR state = ?) ORDER BY id`+limitClause(limit),
		after, f.NodeID, f.NodeID, f.InstanceID, f.InstanceID, string(f.State), string(f.State))
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanNodeTask)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(t nodes.NodeTask) string { return t.ID })
	return out, next, nil
}
