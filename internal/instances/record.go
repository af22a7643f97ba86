package instances

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// EventData is the data of every apps.instance.* event: the seeds'
// attribution fields, then what the transition says.
type EventData struct {
	OrgID             string   `json:"org_id"`
	ProjectID         string   `json:"project_id"`
	AppInstanceID     string   `json:"app_instance_id"`
	AppSlug           string   `json:"app_slug"`
	OperatingMode     string   `json:"operating_mode"`
	ControlPlaneScope string   `json:"control_plane_scope"`
	RuntimeBackend    string   `json:"runtime_backend"`
	CorrelationID     string   `json:"correlation_id"`
	Status            string   `json:"status"`
	Version           string   `json:"version"`
	Digest            string   `json:"digest,omitempty"`
	OperationID       string   `json:"operation_id,omitempty"`
	FromVersion       string   `json:"from_version,omitempty"`
	TargetVersion     string   `json:"target_version,omitempty"`
	ReasonCode        string   `json:"reason_code,omitempty"`
	Reason            string   `json:"reason,omitempty"`
	LogTail           []string `json:"log_tail,omitempty"`
	// Health is set on apps.instance.health_changed.
	Health *HealthChange `json:"health,omitempty"`
	// Member is set on apps.instance.member_* events.
	Member *MemberData `json:"member,omitempty"`
	// AttachedProjectID is set on apps.instance.project_attached|detached.
	AttachedProjectID string `json:"attached_project_id,omitempty"`
}

// extra carries what a transition adds to the event beyond the instance.
type extra struct {
	reasonCode, reason string
	logTail            []string
	health             *HealthChange
	member             *MemberData
	project            string
}

// record appends the instance's timeline row and emits the outbox event of
// a transition, in the caller's transaction. The correlation id is the one
// of the request that started the operation (the worker runs each step
// under it).
func (s *Service) record(ctx context.Context, tx Tx, inst AppInstance, op InstanceOperation, eventType string, x *extra) error {
	d := s.eventData(ctx, inst, op)
	if x != nil {
		d.ReasonCode, d.Reason, d.LogTail, d.Health, d.Member, d.AttachedProjectID = x.reasonCode, x.reason, x.logTail, x.health, x.member, x.project
	}
	e := storage.Event{Type: eventType, Subject: "app-instances/" + inst.ID, OrgID: inst.OrgID, ProjectID: inst.ProjectID}
	if platformManaged(inst.OperatingMode) {
		// A platform-managed instance serves many tenants: the event of
		// one tenant's attachment is not the others' to read (Audience),
		// as on the timeline (Events).
		e.Audience = d.AttachedProjectID
	}
	if err := tx.Emit(e, d); err != nil {
		return err
	}
	payload, err := jsonOf(d)
	if err != nil {
		return err
	}
	return tx.InsertInstanceEvent(ctx, InstanceEvent{ID: iam.NewID(), InstanceID: inst.ID, ProjectID: inst.ProjectID,
		EventType: eventType, Status: inst.Status, OperationID: op.ID, CorrelationID: d.CorrelationID, Payload: payload,
		OccurredAt: s.Now().UTC()})
}

// eventData is what every apps.instance.* event says of the instance and
// the operation (if any) behind it.
func (s *Service) eventData(ctx context.Context, inst AppInstance, op InstanceOperation) EventData {
	return EventData{OrgID: inst.OrgID, ProjectID: inst.ProjectID, AppInstanceID: inst.ID, AppSlug: inst.AppSlug,
		OperatingMode: inst.OperatingMode, ControlPlaneScope: inst.ControlPlaneScope, RuntimeBackend: inst.RuntimeBackend,
		CorrelationID: correlation.ID(ctx), Status: string(inst.Status), Version: inst.Version, Digest: inst.Digest,
		OperationID: op.ID, FromVersion: op.FromVersion, TargetVersion: op.TargetVersion}
}

// newOperation starts an operation record under the request's correlation id.
func (s *Service) newOperation(ctx context.Context, inst AppInstance, kind OperationKind, from, to, description string) InstanceOperation {
	now := s.Now().UTC()
	op := InstanceOperation{ID: iam.NewID(), InstanceID: inst.ID, OrgID: inst.OrgID, ProjectID: inst.ProjectID,
		Kind: kind, State: OpInProgress, Phase: phaseStart, FromVersion: from, TargetVersion: to, Description: description,
		CorrelationID: correlation.ID(ctx), Actor: principal.From(ctx).Key(), CreatedAt: now, UpdatedAt: now,
		Executor: ExecutorPlatform, AppSlug: inst.AppSlug}
	if workerDriven(inst.RuntimeBackend) {
		op.Executor, op.DeadlineAt = ExecutorWorker, now.Add(s.WorkerOperationTimeout)
	}
	return op
}

// auditState is what audit rows keep of an instance (no secrets live on it).
type instanceAudit struct {
	ID                 string `json:"id"`
	AppSlug            string `json:"app_slug"`
	Version            string `json:"version"`
	Digest             string `json:"digest,omitempty"`
	Status             string `json:"status"`
	ReasonCode         string `json:"reason_code,omitempty"`
	TargetAllocationID string `json:"target_allocation_id,omitempty"`
	NodeID             string `json:"node_id,omitempty"`
	ServiceAccountID   string `json:"service_account_id,omitempty"`
	OperationID        string `json:"operation_id,omitempty"`
}

func auditState(i AppInstance) instanceAudit {
	return instanceAudit{ID: i.ID, AppSlug: i.AppSlug, Version: i.Version, Digest: i.Digest, Status: string(i.Status), ReasonCode: i.ReasonCode,
		TargetAllocationID: i.TargetAllocationID, NodeID: i.NodeID, ServiceAccountID: i.ServiceAccountID, OperationID: i.CurrentOperationID}
}
