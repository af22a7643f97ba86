package instances

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/gpuaas/gpuaas/internal/cloudevents"
	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// Runtime event types a workload reports about its own instance (the seeds'
// app_instance_events names, plus heartbeat, unhealthy and member_removed).
const (
	RuntimeHeartbeat      = "heartbeat"
	RuntimeStartCompleted = "start_completed"
	RuntimeHealthy        = "healthy"
	RuntimeUnhealthy      = "unhealthy"
	RuntimeMemberAdded    = "member_added"
	RuntimeMemberRemoved  = "member_removed"
	RuntimeMemberFailed   = "member_failed"
)

// RuntimeEventTypes lists the types a workload may post.
var RuntimeEventTypes = []string{RuntimeHeartbeat, RuntimeStartCompleted, RuntimeHealthy, RuntimeUnhealthy,
	RuntimeMemberAdded, RuntimeMemberRemoved, RuntimeMemberFailed}

// MemberRoles are the roles a member may have (the seeds' names; the
// platform's own deployments use RolePrimary and artifact names).
var MemberRoles = []string{"controller", "worker", "head", "node"}

// Limits on what a workload reports.
const (
	// MaxRuntimeBatch is the most events one post may carry.
	MaxRuntimeBatch = 1000
	// runtimeMaxAge is how late an event may arrive: a workload that
	// buffered while the API was unreachable still lands its member
	// changes on the timeline.
	runtimeMaxAge = 24 * time.Hour
	// runtimeMaxSkew is how far ahead of the platform's clock an event's
	// time may be.
	runtimeMaxSkew = 5 * time.Minute
	maxMemberLen   = 128
	maxMessageLen  = 1024
	// maxReportedPerEvent bounds the events one runtime_reported event
	// lists: each is at most ~2.5 KB (its fields are bounded at parse), so
	// an event stays well inside storage.MaxEventDataBytes.
	maxReportedPerEvent = 64
	// heartbeatSweepLimit bounds the overdue instances one sweep degrades.
	heartbeatSweepLimit = 200
	// HeartbeatSweepInterval is how often overdue heartbeats are looked for.
	HeartbeatSweepInterval = 5 * time.Second
)

var reasonPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// RuntimeEvent is one event a workload reported: the CloudEvent envelope
// and the fields its type uses.
type RuntimeEvent struct {
	ID, Source, Type, Subject string
	Time                      time.Time
	ProjectID                 string
	CorrelationID             string
	// Health is a heartbeat's optional statement (healthy or unhealthy).
	Health HealthState
	// Reason is a machine-readable cause (healthy, unhealthy, member_*).
	Reason string
	// Message says it for a person.
	Message string
	// Member names the member as the app knows it (member_*); Role is its
	// role, when given.
	Member, Role string
}

type wireRuntimeData struct {
	Health  string `json:"health"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Member  string `json:"member"`
	Role    string `json:"role"`
}

// ParseRuntimeEvents reads a structured-mode body of runtime events: one
// event, or an array when batch. Nothing is accepted unless every event is
// valid; each problem is addressed by a JSON pointer.
func ParseRuntimeEvents(body []byte, batch bool, now time.Time) ([]RuntimeEvent, error) {
	return cloudevents.ParseBatch(body, batch, MaxRuntimeBatch, "runtime events", "invalid_runtime_event",
		func(raw json.RawMessage, bad func(field, code, msg string, args ...any)) RuntimeEvent {
			return parseRuntimeEvent(raw, now, bad)
		})
}

func parseRuntimeEvent(raw json.RawMessage, now time.Time, bad func(field, code, msg string, args ...any)) RuntimeEvent {
	env := cloudevents.Decode(raw, now, false, bad)
	ev := RuntimeEvent{ID: env.ID, Source: env.Source, Type: env.Type, Subject: env.Subject, Time: env.Time,
		ProjectID: env.ProjectID, CorrelationID: env.CorrelationID}
	if env.Type != "" && !slices.Contains(RuntimeEventTypes, env.Type) {
		bad("type", "unknown_type", "must be one of %v", RuntimeEventTypes)
	}
	var d wireRuntimeData
	if len(env.Data) > 0 {
		dec := json.NewDecoder(bytes.NewReader(env.Data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			bad("data", "invalid", "must be an object with only health, reason, message, member and role (strings): %v", err)
			return ev
		}
	}
	ev.Reason, ev.Message, ev.Member, ev.Role = d.Reason, d.Message, d.Member, d.Role
	if d.Reason != "" && !reasonPattern.MatchString(d.Reason) {
		bad("data/reason", "invalid", "must be a lowercase code such as gpu_xid_error (a-z, 0-9, '_', at most 64)")
	}
	if len(d.Message) > maxMessageLen || !cloudevents.Printable(d.Message) {
		bad("data/message", "invalid", "must be printable text of at most %d bytes", maxMessageLen)
	}
	member := env.Type == RuntimeMemberAdded || env.Type == RuntimeMemberRemoved || env.Type == RuntimeMemberFailed
	switch {
	case member && (d.Member == "" || len(d.Member) > maxMemberLen || !cloudevents.Printable(d.Member)):
		bad("data/member", "required", "is required for %s: the member's name as the app knows it (1 to %d printable characters)", env.Type, maxMemberLen)
	case !member && d.Member != "":
		bad("data/member", "unexpected", "applies only to member_added, member_removed and member_failed")
	}
	switch {
	case d.Role != "" && !member:
		bad("data/role", "unexpected", "applies only to member_added, member_removed and member_failed")
	case d.Role != "" && !slices.Contains(MemberRoles, d.Role):
		bad("data/role", "invalid", "must be one of %v", MemberRoles)
	}
	switch h := HealthState(d.Health); {
	case h == "":
	case env.Type != RuntimeHeartbeat:
		bad("data/health", "unexpected", "applies only to heartbeat; post healthy or unhealthy events to change health")
	case h != HealthHealthy && h != HealthUnhealthy:
		bad("data/health", "invalid", "must be healthy or unhealthy")
	default:
		ev.Health = h
	}
	return ev
}

// RuntimeEventResult says what became of one reported event.
type RuntimeEventResult struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	// Status: recorded (on the timeline), duplicate (seen before, not
	// applied again) or applied (a heartbeat: it moves the instance's
	// liveness, and is not kept on the timeline).
	Status string `json:"status"`
}

// RuntimeReport answers a runtime-event post, once every change committed.
type RuntimeReport struct {
	Recorded   int                  `json:"recorded"`
	Duplicates int                  `json:"duplicates"`
	Applied    int                  `json:"applied"`
	Health     HealthState          `json:"health"`
	Results    []RuntimeEventResult `json:"results"`
}

// HealthChange is the data an apps.instance.health_changed event adds.
type HealthChange struct {
	From            HealthState `json:"from"`
	To              HealthState `json:"to"`
	Reason          string      `json:"reason,omitempty"`
	LastHeartbeatAt string      `json:"last_heartbeat_at,omitempty"`
}

// ReportedEvent is one recorded runtime event, as an
// apps.instance.runtime_reported event carries it and its timeline row
// keeps it.
type ReportedEvent struct {
	ID      string `json:"id"`
	Source  string `json:"source"`
	Type    string `json:"type"`
	Time    string `json:"time"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Member  string `json:"member,omitempty"`
	Role    string `json:"role,omitempty"`
}

// reportable reports whether a workload may report in status s: while the
// platform deploys or runs it.
func reportable(s InstanceStatus) bool {
	switch s {
	case StatusDeploying, StatusRunning, StatusUpgrading, StatusRollingBack:
		return true
	}
	return false
}

// ReportRuntimeEvents applies what a workload reports about its own
// instance. Only the instance's own identity may report, only for itself;
// an event seen before (by source and id) is a duplicate, answered as
// success and not applied again.
func (s *Service) ReportRuntimeEvents(ctx context.Context, g *iam.Grants, projectID, id string, events []RuntimeEvent) (RuntimeReport, error) {
	p, err := s.IAM.Project(ctx, g, projectID, "")
	if err != nil {
		return RuntimeReport{}, err
	}
	inst, err := s.Store.Read().GetAppInstance(ctx, p.ID, id)
	if errors.Is(err, storage.ErrNotFound) {
		return RuntimeReport{}, errInstanceNotFound(id)
	}
	if err != nil {
		return RuntimeReport{}, err
	}
	sc := iam.Scope{OrgID: p.OrgID, ProjectID: p.ID}
	pr := principal.From(ctx)
	own := pr.Type == principal.ServiceAccount && pr.ID == inst.ServiceAccountID
	if !own && !g.Can(iam.PermInstanceRead, sc) {
		return RuntimeReport{}, errInstanceNotFound(id) // another instance's identity: as Get answers it
	}
	if !own || !g.Can(iam.PermInstanceSelfReport, sc) {
		return RuntimeReport{}, s.IAM.Deny(ctx, iam.PermInstanceSelfReport, sc, "app_instance", inst.ID)
	}
	if err := s.checkRuntimeEvents(inst, events); err != nil {
		return RuntimeReport{}, err
	}
	// Only once the caller is the instance itself and the batch is valid:
	// another identity cannot spend an instance's budget, and a refused
	// batch spends none.
	if err := s.runtimeLimit.take(inst.ID, len(events)); err != nil {
		return RuntimeReport{}, err
	}
	if rep, done, err := s.heartbeatsOnly(ctx, inst.ID, events); err != nil || done {
		return rep, err
	}
	var rep RuntimeReport
	started := false
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		cur, err := lockReportable(ctx, tx, inst.ID)
		if err != nil {
			return err
		}
		now := s.Now().UTC()
		h, from := cur.Health, cur.Health.State
		rep = RuntimeReport{Results: make([]RuntimeEventResult, len(events))}
		// Every event but a heartbeat is a timeline row, written in one go;
		// then each event takes effect in the order it was posted.
		rows := make([]InstanceEvent, len(events))
		reported := make([]ReportedEvent, len(events))
		var timeline []InstanceEvent
		for i, ev := range events {
			if ev.Type == RuntimeHeartbeat {
				continue
			}
			reported[i] = ReportedEvent{ID: ev.ID, Source: ev.Source, Type: ev.Type, Time: ev.Time.Format(time.RFC3339Nano), Reason: ev.Reason,
				Message: ev.Message, Member: ev.Member, Role: ev.Role}
			payload, err := json.Marshal(reported[i])
			if err != nil {
				return err
			}
			cid := ev.CorrelationID
			if cid == "" {
				cid = correlation.ID(ctx)
			}
			rows[i] = InstanceEvent{ID: iam.NewID(), InstanceID: cur.ID, ProjectID: cur.ProjectID, EventType: ev.Type, Status: cur.Status,
				CorrelationID: cid, Payload: payload, OccurredAt: ev.Time, DedupeKey: cloudevents.Key("runtime", cur.ProjectID, ev.Source, ev.ID)}
			timeline = append(timeline, rows[i])
		}
		written, err := tx.InsertReportedInstanceEvents(ctx, timeline)
		if err != nil {
			return err
		}
		if err := storeUnderInstanceKeys(ctx, tx, cur.ID, events, rows, written); err != nil {
			return err
		}
		var recorded []ReportedEvent
		for i, ev := range events {
			res := RuntimeEventResult{ID: ev.ID, Source: ev.Source, Status: "applied"}
			switch {
			case ev.Type == RuntimeHeartbeat:
				heartbeat(&h, ev, now)
				rep.Applied++
			case !written[rows[i].ID]:
				res.Status = "duplicate"
				rep.Duplicates++
			default:
				res.Status = "recorded"
				rep.Recorded++
				recorded = append(recorded, reported[i])
				switch ev.Type {
				case RuntimeStartCompleted:
					if h.StartReportedSeq != cur.DeploySeq {
						h.StartReportedSeq, started = cur.DeploySeq, true
					}
				case RuntimeHealthy:
					h.State, h.Reason = HealthHealthy, ev.Reason
				case RuntimeUnhealthy:
					h.State, h.Reason = HealthUnhealthy, ev.Reason
				}
			}
			rep.Results[i] = res
		}
		if h.State != from {
			h.ChangedAt = now
			if err := s.recordHealth(ctx, tx, cur, from, h); err != nil {
				return err
			}
		}
		rep.Health = h.State
		if err := tx.UpdateAppInstanceHealth(ctx, cur.ID, h); err != nil {
			return err
		}
		d := s.eventData(ctx, cur, InstanceOperation{})
		for chunk := range slices.Chunk(recorded, maxReportedPerEvent) {
			if err := tx.Emit(storage.Event{Type: EventRuntimeReported, Subject: "app-instances/" + cur.ID, OrgID: cur.OrgID, ProjectID: cur.ProjectID},
				runtimeReported{EventData: d, Events: chunk}); err != nil {
				return err
			}
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance.runtime_report", ResourceType: "app_instance", ResourceID: cur.ID,
			OrgID: cur.OrgID, ProjectID: cur.ProjectID}, nil, map[string]int{"recorded": rep.Recorded, "duplicates": rep.Duplicates})
	})
	if err != nil {
		return RuntimeReport{}, err
	}
	if started {
		s.kick() // an operation may be waiting for start_completed
	}
	return rep, nil
}

// lockReportable locks an instance that takes runtime events.
func lockReportable(ctx context.Context, q Queries, id string) (AppInstance, error) {
	cur, err := q.LockAppInstance(ctx, id)
	if err != nil {
		return AppInstance{}, err
	}
	if !reportable(cur.Status) {
		return AppInstance{}, errdefs.Conflict("app_instance_not_running",
			"app instance %s is %s; a workload reports runtime events only while its instance is deploying or running", cur.ID, cur.Status)
	}
	return cur, nil
}

// heartbeatsOnly applies a post of heartbeats that leaves the instance's
// health as it was: bookkeeping, the common case, with no timeline row,
// event or audit row (done). A post with other events, or one that changes
// health, is left to the audited path (not done).
func (s *Service) heartbeatsOnly(ctx context.Context, id string, events []RuntimeEvent) (RuntimeReport, bool, error) {
	for _, ev := range events {
		if ev.Type != RuntimeHeartbeat {
			return RuntimeReport{}, false, nil
		}
	}
	var rep RuntimeReport
	done := false
	err := s.Store.InTx(ctx, func(q Queries) error {
		cur, err := lockReportable(ctx, q, id)
		if err != nil {
			return err
		}
		h, now := cur.Health, s.Now().UTC()
		rep = RuntimeReport{Applied: len(events), Results: make([]RuntimeEventResult, len(events))}
		for i, ev := range events {
			heartbeat(&h, ev, now)
			rep.Results[i] = RuntimeEventResult{ID: ev.ID, Source: ev.Source, Status: "applied"}
		}
		if h.State != cur.Health.State {
			return nil
		}
		rep.Health, done = h.State, true
		return q.UpdateAppInstanceHealth(ctx, cur.ID, h)
	})
	return rep, done, err
}

// heartbeat applies one heartbeat: the instance is alive now, and its next
// heartbeat is due a timeout from now. A heartbeat without a health
// statement makes an instance that was unknown or degraded healthy; one
// the app called unhealthy stays so until it says otherwise.
func heartbeat(h *Health, ev RuntimeEvent, now time.Time) {
	h.LastHeartbeatAt = now
	if h.HeartbeatTimeoutSeconds > 0 {
		h.HeartbeatDueAt = now.Add(time.Duration(h.HeartbeatTimeoutSeconds) * time.Second)
	}
	switch {
	case ev.Health != "":
		if ev.Health != h.State {
			h.State, h.Reason = ev.Health, ev.Reason
		}
	case h.State == HealthDegraded:
		h.State, h.Reason = HealthHealthy, ReasonHeartbeatResumed
	case h.State == HealthUnknown:
		h.State, h.Reason = HealthHealthy, ""
	}
}

// checkRuntimeEvents applies the rules that need the instance: the events
// are its own, and within the accepted time window.
func (s *Service) checkRuntimeEvents(inst AppInstance, events []RuntimeEvent) error {
	now := s.Now().UTC()
	var fe []errdefs.FieldError
	for i, ev := range events {
		at := ""
		if len(events) > 1 {
			at = fmt.Sprintf("/%d", i)
		}
		if err := cloudevents.CheckOwn("runtime_event", ev.ID, ev.ProjectID, ev.Subject, inst.ID, inst.ProjectID); err != nil {
			return err
		}
		switch {
		case ev.Time.Before(now.Add(-runtimeMaxAge)):
			fe = append(fe, errdefs.FieldError{Field: at + "/time", Code: "too_old",
				Message: "is older than the " + runtimeMaxAge.String() + " a late runtime event may be"})
		case ev.Time.After(now.Add(runtimeMaxSkew)):
			fe = append(fe, errdefs.FieldError{Field: at + "/time", Code: "in_future",
				Message: "is in the future; check the workload's clock"})
		}
	}
	if fe != nil {
		e := errdefs.Validation(fe)
		e.Code = "runtime_event_out_of_window"
		return e
	}
	return nil
}

// runtimeReported is the data of an apps.instance.runtime_reported event.
type runtimeReported struct {
	EventData
	Events []ReportedEvent `json:"events"`
}

// recordHealth writes the timeline row and event of a health change, in
// the caller's transaction.
func (s *Service) recordHealth(ctx context.Context, tx Tx, inst AppInstance, from HealthState, h Health) error {
	c := HealthChange{From: from, To: h.State, Reason: h.Reason}
	if !h.LastHeartbeatAt.IsZero() {
		c.LastHeartbeatAt = h.LastHeartbeatAt.Format(time.RFC3339Nano)
	}
	return s.record(ctx, tx, inst, InstanceOperation{}, EventHealthChanged, &extra{reasonCode: h.Reason, health: &c})
}

// HeartbeatWorker degrades running instances whose heartbeat is overdue.
func (s *Service) HeartbeatWorker() *worker.Periodic { return s.heartbeats }

func (s *Service) newHeartbeatWorker() *worker.Periodic {
	// OnStart forgets when the sweep began: a Start after a Stop (the
	// schema guard pauses every job, and this replica refused the
	// heartbeats meanwhile) waits again as after an outage.
	return &worker.Periodic{Name: "instance-heartbeats", Interval: HeartbeatSweepInterval, Timeout: time.Minute, Logger: s.Logger,
		Run: s.SweepHeartbeats, OnStart: func() { s.listening.Store(0) }}
}

// SweepHeartbeats degrades every running instance whose workload missed
// its heartbeat, each in its own transaction with its event.
//
// It judges an instance only once this replica has been sweeping for that
// instance's whole heartbeat timeout: a silence counts only while the
// control plane could hear the workload. After an outage of every replica
// (an upgrade that stops them, a restart of a single-process install) each
// heartbeat is as overdue as the outage is long, and the workloads beat
// again within their timeout of the API being back; judging at once
// degraded every heartbeating instance at the first sweep. A replica that
// restarts while others run loses nothing by waiting: they sweep. The same
// holds after its worker was stopped and started again (the schema guard's
// pause). (The nodes' liveness worker waits the same way.)
func (s *Service) SweepHeartbeats(ctx context.Context) error {
	now := s.Now().UTC()
	s.listening.CompareAndSwap(0, now.UnixNano())
	heard := now.Sub(time.Unix(0, s.listening.Load()))
	due, err := s.Store.Read().HeartbeatsOverdue(ctx, now, int(heard/time.Second), heartbeatSweepLimit)
	if err != nil {
		return err
	}
	ctx = principal.With(ctx, principal.SystemActor)
	var errs []error
	for _, inst := range due {
		errs = append(errs, s.Store.Mutate(ctx, func(tx Tx) error {
			cur, err := tx.LockAppInstance(ctx, inst.ID)
			if err != nil {
				return err
			}
			now := s.Now().UTC()
			h := cur.Health
			// A heartbeat may have landed since the list was read.
			if cur.Status != StatusRunning || h.State == HealthDegraded || h.HeartbeatDueAt.IsZero() || !h.HeartbeatDueAt.Before(now) {
				return nil
			}
			from := h.State
			h.State, h.Reason, h.ChangedAt = HealthDegraded, ReasonHeartbeatMissed, now
			if err := tx.UpdateAppInstanceHealth(ctx, cur.ID, h); err != nil {
				return err
			}
			if err := s.recordHealth(ctx, tx, cur, from, h); err != nil {
				return err
			}
			why := fmt.Sprintf("no heartbeat within %d s of reaching running", h.HeartbeatTimeoutSeconds)
			if !h.LastHeartbeatAt.IsZero() {
				why = fmt.Sprintf("no heartbeat since %s (timeout %d s)", h.LastHeartbeatAt.Format(time.RFC3339), h.HeartbeatTimeoutSeconds)
			}
			return tx.Audit(storage.AuditEvent{Action: "app_instance.degraded", ResourceType: "app_instance", ResourceID: cur.ID,
				OrgID: cur.OrgID, ProjectID: cur.ProjectID, Reason: why}, nil, auditState(cur))
		}))
	}
	return errors.Join(errs...)
}

// storeUnderInstanceKeys stores again, under a key within the instance,
// the timeline rows another instance's row kept out (cloudevents.Rekey),
// and marks those it stores in written. rows are the rows tried, index
// for index with events (a heartbeat's is empty).
func storeUnderInstanceKeys(ctx context.Context, tx Tx, instanceID string, events []RuntimeEvent, rows []InstanceEvent, written map[string]bool) error {
	keyed := make([]cloudevents.Keyed, 0, len(rows))
	for i, ev := range events {
		if rows[i].ID != "" {
			keyed = append(keyed, cloudevents.Keyed{RowID: rows[i].ID, Key: rows[i].DedupeKey, Source: ev.Source, EventID: ev.ID})
		}
	}
	rekeyed, err := cloudevents.Rekey(ctx, "runtime-instance", instanceID, keyed, written, tx.ReportedEventKeyOwners)
	if err != nil || len(rekeyed) == 0 {
		return err
	}
	var again []InstanceEvent
	for _, r := range rows {
		if k, ok := rekeyed[r.ID]; ok {
			r.DedupeKey = k
			again = append(again, r)
		}
	}
	more, err := tx.InsertReportedInstanceEvents(ctx, again)
	for id := range more {
		written[id] = true
	}
	return err
}
