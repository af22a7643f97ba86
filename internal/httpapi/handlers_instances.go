package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/instances"
)

type operationView struct {
	ID            string `json:"id"`
	AppInstanceID string `json:"app_instance_id"`
	ProjectID     string `json:"project_id"`
	Kind          string `json:"kind"`
	State         string `json:"state"`
	Description   string `json:"description"`
	ReasonCode    string `json:"reason_code"`
	FromVersion   string `json:"from_version"`
	TargetVersion string `json:"target_version"`
	CorrelationID string `json:"correlation_id"`
	CreatedAt     string `json:"created_at"`
	UpdatedAt     string `json:"updated_at"`
	CompletedAt   string `json:"completed_at,omitempty"`
	// MemberIDs are the members a member operation acts on.
	MemberIDs []string `json:"member_ids,omitempty"`
}

func viewOperation(o instances.InstanceOperation) operationView {
	return operationView{ID: o.ID, AppInstanceID: o.InstanceID, ProjectID: o.ProjectID, Kind: string(o.Kind), State: string(o.State),
		Description: o.Description, ReasonCode: o.ReasonCode, FromVersion: o.FromVersion, TargetVersion: o.TargetVersion,
		CorrelationID: o.CorrelationID, CreatedAt: rfc3339(o.CreatedAt), UpdatedAt: rfc3339(o.UpdatedAt), CompletedAt: rfc3339(o.CompletedAt),
		MemberIDs: o.MemberIDs}
}

type instanceVersionView struct {
	Version string `json:"version"`
	Digest  string `json:"digest"`
}

type instanceView struct {
	ID                 string                     `json:"id"`
	OrgID              string                     `json:"org_id"`
	ProjectID          string                     `json:"project_id"`
	AppSlug            string                     `json:"app_slug"`
	Version            string                     `json:"version"`
	Digest             string                     `json:"digest"`
	DisplayName        string                     `json:"display_name"`
	Status             string                     `json:"status"`
	ReasonCode         string                     `json:"reason_code"`
	ReasonMessage      string                     `json:"reason_message"`
	OperatingMode      string                     `json:"operating_mode"`
	ControlPlaneScope  string                     `json:"control_plane_scope"`
	RuntimeBackend     string                     `json:"runtime_backend"`
	TenantBoundaryMode string                     `json:"tenant_boundary_mode"`
	Resources          catalog.EffectiveResources `json:"resources"`
	Config             json.RawMessage            `json:"config"`
	PlacementIntent    json.RawMessage            `json:"placement_intent"`
	Parameters         json.RawMessage            `json:"parameters"`
	TargetAllocationID string                     `json:"target_allocation_id"`
	GPUUUIDs           []string                   `json:"gpu_uuids,omitempty"`
	NodeID             string                     `json:"node_id"`
	ServiceAccountID   string                     `json:"service_account_id"`
	Access             *instances.Access          `json:"access"`
	History            []instanceVersionView      `json:"version_history"`
	CurrentOperationID string                     `json:"current_operation_id"`
	CreatedBy          string                     `json:"created_by"`
	CreatedAt          string                     `json:"created_at"`
	UpdatedAt          string                     `json:"updated_at"`
	DecommissionedAt   string                     `json:"decommissioned_at,omitempty"`
	Health             instanceHealthView         `json:"health"`
	// Set on the answer of a lifecycle request: the operation it started.
	OperationID string         `json:"operation_id,omitempty"`
	Operation   *operationView `json:"operation,omitempty"`
}

func nullIfEmpty(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func viewInstance(i instances.AppInstance) instanceView {
	doc := instances.EffectiveOf(i)
	v := instanceView{ID: i.ID, OrgID: i.OrgID, ProjectID: i.ProjectID, AppSlug: i.AppSlug, Version: i.Version, Digest: i.Digest,
		DisplayName: i.DisplayName, Status: string(i.Status), ReasonCode: i.ReasonCode, ReasonMessage: i.ReasonMessage,
		OperatingMode: i.OperatingMode, ControlPlaneScope: i.ControlPlaneScope, RuntimeBackend: i.RuntimeBackend,
		TenantBoundaryMode: i.TenantBoundaryMode, Resources: doc.Effective.Resources, Config: nullIfEmpty(doc.Effective.Config),
		PlacementIntent: nullIfEmpty(doc.Effective.PlacementIntent), Parameters: nullIfEmpty(doc.Effective.Parameters),
		TargetAllocationID: i.TargetAllocationID, GPUUUIDs: i.GPUUUIDs, NodeID: i.NodeID, ServiceAccountID: i.ServiceAccountID,
		Access: instances.AccessOf(i), History: []instanceVersionView{}, CurrentOperationID: i.CurrentOperationID,
		CreatedBy: i.CreatedBy, CreatedAt: rfc3339(i.CreatedAt), UpdatedAt: rfc3339(i.UpdatedAt), DecommissionedAt: rfc3339(i.DecommissionedAt)}
	for _, h := range instances.HistoryOf(i) {
		v.History = append(v.History, instanceVersionView{Version: h.Version, Digest: h.Digest})
	}
	v.Health = instanceHealthView{State: string(i.Health.State), Reason: i.Health.Reason, ChangedAt: rfc3339(i.Health.ChangedAt),
		LastHeartbeatAt: rfc3339(i.Health.LastHeartbeatAt), HeartbeatTimeoutSeconds: i.Health.HeartbeatTimeoutSeconds,
		HeartbeatDueAt: rfc3339(i.Health.HeartbeatDueAt)}
	return v
}

// instanceHealthView is what the workload reported about itself.
type instanceHealthView struct {
	State                   string `json:"state"`
	Reason                  string `json:"reason,omitempty"`
	ChangedAt               string `json:"changed_at,omitempty"`
	LastHeartbeatAt         string `json:"last_heartbeat_at,omitempty"`
	HeartbeatTimeoutSeconds int    `json:"heartbeat_timeout_seconds,omitempty"`
	HeartbeatDueAt          string `json:"heartbeat_due_at,omitempty"`
}

// runtimeEventsMaxBody admits a full batch of runtime events
// (instances.MaxRuntimeBatch events with their longest messages).
const runtimeEventsMaxBody = 4 << 20

// postRuntimeEvents takes what a workload reports about its own instance
// (heartbeat, health, start_completed, member changes) as CloudEvents,
// like usage; the answer comes once they are committed.
func (a *API) postRuntimeEvents(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	body, batch, err := readCloudEvents(r)
	if err != nil {
		return err
	}
	events, err := instances.ParseRuntimeEvents(body, batch, svc.Now())
	if err != nil {
		return err
	}
	res, err := svc.ReportRuntimeEvents(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"), events)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// accepted answers a lifecycle request: 202, the instance, and the
// operation to poll (also in Location).
func accepted(w http.ResponseWriter, inst instances.AppInstance, op instances.InstanceOperation) {
	v := viewInstance(inst)
	ov := viewOperation(op)
	v.OperationID, v.Operation = op.ID, &ov
	w.Header().Set("Location", "/api/v1/projects/"+inst.ProjectID+"/operations/"+op.ID)
	writeJSON(w, http.StatusAccepted, v)
}

func (a *API) instancesService() (*instances.Service, error) {
	if a.Instances == nil {
		return nil, &errdefs.Error{Kind: errdefs.KindUnavailable, Code: "instances_unavailable", Message: "this server runs no app-instance service"}
	}
	return a.Instances, nil
}

func (a *API) createInstance(w http.ResponseWriter, r *http.Request) error {
	var in instances.CreateInput
	if err := decode(r, &in); err != nil {
		return err
	}
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	inst, op, err := svc.Create(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), in)
	if err != nil {
		return err
	}
	accepted(w, inst, op)
	return nil
}

func (a *API) listInstances(w http.ResponseWriter, r *http.Request) error {
	p, err := page(r)
	if err != nil {
		return err
	}
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	is, next, err := svc.List(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), instances.InstanceStatus(r.URL.Query().Get("status")), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(is, next, viewInstance))
	return nil
}

func (a *API) getInstance(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	inst, err := svc.Get(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewInstance(inst))
	return nil
}

func (a *API) instanceVersionAction(rollback bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var in instances.VersionInput
		if err := decode(r, &in); err != nil {
			return err
		}
		svc, err := a.instancesService()
		if err != nil {
			return err
		}
		act := svc.Upgrade
		if rollback {
			act = svc.Rollback
		}
		inst, op, err := act(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"), in)
		if err != nil {
			return err
		}
		accepted(w, inst, op)
		return nil
	}
}

func (a *API) decommissionInstance(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	inst, op, err := svc.Decommission(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"))
	if err != nil {
		return err
	}
	accepted(w, inst, op)
	return nil
}

type instanceEventView struct {
	ID            string          `json:"id"`
	AppInstanceID string          `json:"app_instance_id"`
	EventType     string          `json:"event_type"`
	Status        string          `json:"status"`
	OperationID   string          `json:"operation_id"`
	CorrelationID string          `json:"correlation_id"`
	Payload       json.RawMessage `json:"payload"`
	OccurredAt    string          `json:"occurred_at"`
}

func (a *API) listInstanceEvents(w http.ResponseWriter, r *http.Request) error {
	p, err := page(r)
	if err != nil {
		return err
	}
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	es, next, err := svc.Events(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(es, next, func(e instances.InstanceEvent) instanceEventView {
		return instanceEventView{ID: e.ID, AppInstanceID: e.InstanceID, EventType: e.EventType, Status: string(e.Status), OperationID: e.OperationID,
			CorrelationID: e.CorrelationID, Payload: nullIfEmpty(e.Payload), OccurredAt: rfc3339(e.OccurredAt)}
	}))
	return nil
}

type instanceMemberView struct {
	ID            string   `json:"id"`
	Name          string   `json:"name,omitempty"`
	Added         bool     `json:"added"`
	AllocationID  string   `json:"allocation_id"`
	NodeID        string   `json:"node_id"`
	Role          string   `json:"role"`
	Status        string   `json:"status"`
	ReasonCode    string   `json:"reason_code,omitempty"`
	ReasonMessage string   `json:"reason_message,omitempty"`
	Version       string   `json:"version"`
	Digest        string   `json:"digest"`
	WorkloadName  string   `json:"workload_name"`
	ContainerIDs  []string `json:"container_ids"`
	GPUUUIDs      []string `json:"gpu_uuids,omitempty"`
	CreatedAt     string   `json:"created_at"`
	UpdatedAt     string   `json:"updated_at"`
}

func viewMember(m instances.InstanceMember) instanceMemberView {
	ids := []string{}
	_ = json.Unmarshal(m.ContainerIDs, &ids)
	if ids == nil {
		ids = []string{}
	}
	return instanceMemberView{ID: m.ID, Name: m.Name, Added: m.Added, AllocationID: m.AllocationID, NodeID: m.NodeID, Role: m.Role,
		Status: string(m.Status), ReasonCode: m.ReasonCode, ReasonMessage: m.ReasonMessage, Version: m.Version, Digest: m.Digest,
		WorkloadName: m.WorkloadName, ContainerIDs: ids, GPUUUIDs: m.GPUUUIDs, CreatedAt: rfc3339(m.CreatedAt), UpdatedAt: rfc3339(m.UpdatedAt)}
}

func (a *API) listInstanceMembers(w http.ResponseWriter, r *http.Request) error {
	p, err := page(r)
	if err != nil {
		return err
	}
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	ms, next, err := svc.Members(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(ms, next, viewMember))
	return nil
}

// memberOperationView answers a member request: the operation that acts,
// and the members it acts on as they are now.
type memberOperationView struct {
	AppInstanceID string               `json:"app_instance_id"`
	OperationID   string               `json:"operation_id"`
	Operation     operationView        `json:"operation"`
	Members       []instanceMemberView `json:"members"`
}

func acceptedMembers(w http.ResponseWriter, inst instances.AppInstance, op instances.InstanceOperation, ms []instances.InstanceMember) {
	v := memberOperationView{AppInstanceID: inst.ID, OperationID: op.ID, Operation: viewOperation(op), Members: []instanceMemberView{}}
	for _, m := range ms {
		v.Members = append(v.Members, viewMember(m))
	}
	w.Header().Set("Location", "/api/v1/projects/"+inst.ProjectID+"/operations/"+op.ID)
	writeJSON(w, http.StatusAccepted, v)
}

func (a *API) addInstanceMembers(w http.ResponseWriter, r *http.Request) error {
	var in instances.MembersInput
	if err := decode(r, &in); err != nil {
		return err
	}
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	inst, op, ms, err := svc.AddMembers(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"), in)
	if err != nil {
		return err
	}
	acceptedMembers(w, inst, op, ms)
	return nil
}

func (a *API) instanceMemberAction(recover bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		svc, err := a.instancesService()
		if err != nil {
			return err
		}
		act := svc.RemoveMember
		if recover {
			act = svc.RecoverMember
		}
		inst, op, m, err := act(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"), r.PathValue("member_id"))
		if err != nil {
			return err
		}
		acceptedMembers(w, inst, op, []instances.InstanceMember{m})
		return nil
	}
}

type instanceLogsView struct {
	AppInstanceID string   `json:"app_instance_id"`
	Status        string   `json:"status"`
	ReasonCode    string   `json:"reason_code"`
	Lines         []string `json:"lines"`
}

func (a *API) instanceLogs(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	inst, lines, err := svc.Logs(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, instanceLogsView{AppInstanceID: inst.ID, Status: string(inst.Status), ReasonCode: inst.ReasonCode, Lines: lines})
	return nil
}

func (a *API) getOperation(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	op, err := svc.Operation(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("operation_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewOperation(op))
	return nil
}

type uiOpenView struct {
	Code       string `json:"code"`
	InstanceID string `json:"app_instance_id"`
	URL        string `json:"url"`
	ExpiresAt  string `json:"expires_at"`
}

// openInstanceUI hands a person a one-time link that opens the instance's
// embedded UI through the gateway (the console's "Open app").
func (a *API) openInstanceUI(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	if a.UIOpenURL == nil {
		return errdefs.FailedPrecondition("ui_gateway_off", "this server runs no UI gateway (set --apps-domain)")
	}
	o, err := svc.OpenUI(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"))
	if err != nil {
		return err
	}
	v := uiOpenView{Code: o.Code, InstanceID: o.InstanceID, URL: a.UIOpenURL(o.InstanceID, o.Path, o.Code), ExpiresAt: rfc3339(o.ExpiresAt)}
	// The code is a credential: shown once, never replayed by idempotency.
	redacted := v
	redacted.Code, redacted.URL = "", "(withheld: the one-time link is shown once; open the app again)"
	writeSecretJSON(w, http.StatusCreated, v, redacted)
	return nil
}
