package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/wakeup"
)

// Limits of the task queue.
const (
	maxPayloadBytes = 1 << 20
	maxPollTasks    = 32
	maxMessageBytes = 4 << 10
	maxLogLines     = 200
	maxOutputBytes  = 64 << 10
)

// Kinds lists the task kinds the agent executes.
var Kinds = []string{nodeapi.KindImagePull, nodeapi.KindContainerRun, nodeapi.KindContainerStop, nodeapi.KindContainerRemove,
	nodeapi.KindComposeUp, nodeapi.KindComposeDown, nodeapi.KindWorkloadInspect, nodeapi.KindTeardownVerify}

func knownKind(k string) bool {
	for _, x := range Kinds {
		if x == k {
			return true
		}
	}
	return false
}

// Task is a queued task with its payload opened, as other domains see it.
type Task struct {
	NodeTask
	PayloadJSON json.RawMessage
}

// EnqueueTask queues a task for a node inside the caller's transaction, so
// the task exists exactly when the caller's change commits. The node's long
// polls wake once it commits. payload is a nodeapi payload value or raw
// JSON. With a nil tx the task is queued in its own audited transaction.
func (s *Service) EnqueueTask(ctx context.Context, tx storage.Tx, nodeID, kind string, payload any, instanceID, projectID string) (Task, error) {
	if !knownKind(kind) {
		return Task{}, errdefs.Invalid("unknown_task_kind", "task kind %q is not one the agent executes", kind)
	}
	var raw []byte
	switch v := payload.(type) {
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return Task{}, fmt.Errorf("task payload: %w", err)
		}
		raw = b
	}
	if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return Task{}, errdefs.Invalid("invalid_task_payload", "a task payload must be a JSON object")
	}
	if len(raw) > maxPayloadBytes {
		return Task{}, errdefs.Invalid("task_payload_too_large", "a task payload is at most %d bytes", maxPayloadBytes)
	}
	now := s.Now()
	t := NodeTask{ID: iam.NewID(), NodeID: nodeID, Kind: kind, InstanceID: instanceID, ProjectID: projectID,
		State: TaskQueued, CreatedAt: now, UpdatedAt: now}
	sealed, err := s.seal(t.ID, raw)
	if err != nil {
		return Task{}, err
	}
	t.Payload = sealed
	insert := func(tx Tx) error {
		if err := tx.InsertNodeTask(ctx, t); err != nil {
			if errors.Is(err, storage.ErrConflict) {
				return errNodeNotFound(nodeID)
			}
			return err
		}
		tx.AfterCommit(func() { s.Wake.Notify(wakeup.NodeTasks(nodeID)) })
		return nil
	}
	if tx != nil {
		if err := insert(s.Store.Join(tx)); err != nil {
			return Task{}, err
		}
	} else {
		err := s.Store.Mutate(ctx, func(tx Tx) error {
			if err := insert(tx); err != nil {
				return err
			}
			return tx.Audit(storage.AuditEvent{Action: "node.task.enqueue", ResourceType: "node_task", ResourceID: t.ID, ProjectID: projectID},
				nil, map[string]any{"node_id": nodeID, "kind": kind, "instance_id": instanceID})
		})
		if err != nil {
			return Task{}, err
		}
	}
	return Task{NodeTask: t, PayloadJSON: raw}, nil
}

func (s *Service) seal(id string, raw []byte) (string, error) {
	if s.Sealer == nil {
		return string(raw), nil
	}
	return s.Sealer.Seal(raw, "node_task:"+id)
}

func (s *Service) open(t NodeTask) (json.RawMessage, error) {
	if s.Sealer == nil {
		return json.RawMessage(t.Payload), nil
	}
	b, err := s.Sealer.Open(t.Payload, "node_task:"+t.ID)
	if err != nil {
		return nil, fmt.Errorf("open payload of task %s: %w", t.ID, err)
	}
	return b, nil
}

// PollTasks leases up to maxTasks deliverable tasks of the calling node,
// waiting up to wait for one to arrive. Delivery is at least once: a task
// whose lease runs out before its result arrives is delivered again, with
// a higher attempt number.
func (s *Service) PollTasks(ctx context.Context, nodeID string, wait time.Duration, maxTasks int) ([]nodeapi.Task, error) {
	if err := self(ctx, nodeID); err != nil {
		return nil, err
	}
	if err := s.takeRequest(nodeID, "task poll"); err != nil {
		return nil, err
	}
	if maxTasks <= 0 || maxTasks > maxPollTasks {
		maxTasks = maxPollTasks
	}
	wait = min(max(wait, 0), MaxWait)
	deadline := time.Now().Add(wait)
	for {
		// Take the wake-up channel before looking, so an enqueue between
		// the look and the wait is not missed.
		woken := s.Wake.Wait(wakeup.NodeTasks(nodeID))
		tasks, err := s.lease(ctx, nodeID, maxTasks)
		if err != nil || len(tasks) > 0 {
			return tasks, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return []nodeapi.Task{}, nil
		}
		timer := time.NewTimer(min(left, s.lookAgainIn(nodeID)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return []nodeapi.Task{}, nil
		case <-s.closing:
			timer.Stop()
			return []nodeapi.Task{}, nil
		case <-woken:
		case <-timer.C:
			if time.Until(deadline) <= 0 {
				// The wait is over: the agent's next poll looks first
				// thing, so a look here would only double its cost.
				return []nodeapi.Task{}, nil
			}
		}
		timer.Stop()
	}
}

func (s *Service) lease(ctx context.Context, nodeID string, maxTasks int) ([]nodeapi.Task, error) {
	now := s.Now()
	q := s.Store.Read()
	cands, err := q.DeliverableNodeTasks(ctx, nodeID, now, maxTasks)
	if err != nil || len(cands) == 0 {
		return []nodeapi.Task{}, err
	}
	out := make([]nodeapi.Task, 0, len(cands))
	expires := now.Add(s.TaskLease)
	err = s.Store.InTx(ctx, func(q Queries) error {
		for _, t := range cands {
			if err := q.LeaseNodeTask(ctx, t.ID, now, expires); err != nil {
				if errors.Is(err, storage.ErrNotFound) {
					continue // another poll took it
				}
				return err
			}
			payload, err := s.open(t)
			if err != nil {
				return err
			}
			out = append(out, nodeapi.Task{ID: t.ID, NodeID: t.NodeID, Kind: t.Kind, InstanceID: t.InstanceID, ProjectID: t.ProjectID,
				Attempt: t.Attempt + 1, Payload: payload, CreatedAt: t.CreatedAt, LeaseExpiry: expires})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) > 0 {
		s.leaseMu.Lock()
		s.leases[nodeID] = append(s.leases[nodeID], expires)
		s.leaseMu.Unlock()
	}
	return out, nil
}

// lookAgainIn is how long a poll of nodeID may wait without a wake-up: the
// slow fallback, or less when a lease this replica granted to the node runs
// out sooner (its task is then delivered again, and no one notifies that).
func (s *Service) lookAgainIn(nodeID string) time.Duration {
	wait := s.SlowPoll
	now := s.Now()
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	// Expiries already past were covered by the look that follows them.
	kept := s.leases[nodeID][:0]
	for _, t := range s.leases[nodeID] {
		if d := t.Sub(now) + 10*time.Millisecond; d > 0 {
			kept = append(kept, t)
			wait = min(wait, d)
		}
	}
	if len(kept) == 0 {
		delete(s.leases, nodeID)
	} else {
		s.leases[nodeID] = kept
	}
	return wait
}

var reasonRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

func errTaskNotFound(id string) error {
	return errdefs.NotFound("task_not_found", "task %q does not exist on this node", id)
}

// ReportResult records how a task ended. It is idempotent by task id: a
// repeated report of a completed task changes nothing. Result handlers and
// the nodes.task.completed event see the first report only.
func (s *Service) ReportResult(ctx context.Context, nodeID, taskID string, r nodeapi.TaskResult) error {
	if err := self(ctx, nodeID); err != nil {
		return err
	}
	if err := s.takeRequest(nodeID, "task result"); err != nil {
		return err
	}
	if _, err := uuid.Parse(taskID); err != nil {
		return errTaskNotFound(taskID)
	}
	var fe []errdefs.FieldError
	switch r.State {
	case nodeapi.ResultSucceeded:
	case nodeapi.ResultFailed:
		if !reasonRE.MatchString(r.ReasonCode) {
			fe = append(fe, errdefs.FieldError{Field: "/reason_code", Code: "required", Message: "a failed task needs a reason code such as image_pull_failed (see nodeapi)"})
		}
	default:
		fe = append(fe, errdefs.FieldError{Field: "/state", Code: "invalid", Message: "must be succeeded or failed"})
	}
	if r.ReasonCode != "" && !reasonRE.MatchString(r.ReasonCode) {
		fe = append(fe, errdefs.FieldError{Field: "/reason_code", Code: "invalid", Message: "lowercase letters, digits and '_', at most 64"})
	}
	if len(r.Message) > maxMessageBytes {
		fe = append(fe, errdefs.FieldError{Field: "/message", Code: "too_long", Message: fmt.Sprintf("at most %d bytes", maxMessageBytes)})
	}
	if len(r.LogTail) > maxLogLines {
		fe = append(fe, errdefs.FieldError{Field: "/log_tail", Code: "too_long", Message: fmt.Sprintf("at most %d lines", maxLogLines)})
	}
	if len(r.Output) > maxOutputBytes {
		fe = append(fe, errdefs.FieldError{Field: "/output", Code: "too_long", Message: fmt.Sprintf("at most %d bytes", maxOutputBytes)})
	}
	if bytes.Contains(r.Output, []byte(`\u0000`)) {
		fe = append(fe, errdefs.FieldError{Field: "/output", Code: "invalid", Message: "must not hold NUL characters (\\u0000)"})
	}
	if fe != nil {
		return errdefs.Validation(fe)
	}
	// A workload's log lines are whatever bytes it wrote. NUL is no text
	// (PostgreSQL's JSONB refuses \u0000, which would fail the result's
	// every delivery), so it is shown as U+FFFD, as invalid UTF-8 already is.
	r.Message = noNUL(r.Message)
	r.LogTail = slices.Clone(r.LogTail)
	for i, l := range r.LogTail {
		r.LogTail[i] = noNUL(l)
	}
	result, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.Store.Mutate(ctx, func(tx Tx) error {
		t, err := tx.GetNodeTask(ctx, taskID)
		if errors.Is(err, storage.ErrNotFound) || (err == nil && t.NodeID != nodeID) {
			return errTaskNotFound(taskID)
		}
		if err != nil {
			return err
		}
		audit := storage.AuditEvent{Action: "node.task.result", ResourceType: "node_task", ResourceID: t.ID, ProjectID: t.ProjectID}
		if t.State == TaskSucceeded || t.State == TaskFailed {
			audit.Reason = "already_completed"
			return tx.Audit(audit, nil, map[string]any{"state": t.State})
		}
		now := s.Now()
		if err := tx.CompleteNodeTask(ctx, t.ID, TaskState(r.State), r.ReasonCode, r.Message, result, now); errors.Is(err, storage.ErrNotFound) {
			// A concurrent report of the same task (the agent retrying a
			// report whose answer it lost) completed it after the read
			// above: the PostgreSQL update waited for that commit and then
			// matched nothing. It is the same repeat as the one answered
			// above, not a missing task.
			if t, err = tx.GetNodeTask(ctx, t.ID); err != nil {
				return err
			}
			audit.Reason = "already_completed"
			return tx.Audit(audit, nil, map[string]any{"state": t.State})
		} else if err != nil {
			return err
		}
		t.State, t.ReasonCode, t.Message, t.Result, t.CompletedAt = TaskState(r.State), r.ReasonCode, r.Message, result, now
		if err := tx.Emit(storage.Event{Type: EventTaskCompleted, Subject: "node-tasks/" + t.ID, ProjectID: t.ProjectID}, map[string]any{
			"task_id": t.ID, "node_id": t.NodeID, "kind": t.Kind, "instance_id": t.InstanceID, "state": r.State, "reason_code": r.ReasonCode}); err != nil {
			return err
		}
		payload, err := s.open(t)
		if err != nil {
			return err
		}
		for _, h := range s.resultHandlers(t.Kind) {
			if err := h(ctx, tx, Task{NodeTask: t, PayloadJSON: payload}, r); err != nil {
				return err
			}
		}
		audit.Reason = r.ReasonCode
		return tx.Audit(audit, nil, map[string]any{"state": r.State, "kind": t.Kind, "attempt": t.Attempt})
	})
}

// Task reads one task with its payload, for other domains.
func (s *Service) Task(ctx context.Context, id string) (Task, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Task{}, errTaskNotFound(id)
	}
	t, err := s.Store.Read().GetNodeTask(ctx, id)
	if errors.Is(err, storage.ErrNotFound) {
		return Task{}, errTaskNotFound(id)
	}
	if err != nil {
		return Task{}, err
	}
	payload, err := s.open(t)
	return Task{NodeTask: t, PayloadJSON: payload}, err
}

// Tasks lists tasks (of a node, an instance, a state) for other domains.
func (s *Service) Tasks(ctx context.Context, f NodeTaskFilter, p storage.Page) ([]NodeTask, string, error) {
	return s.Store.Read().ListNodeTasks(ctx, f, p)
}

func noNUL(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }
