package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
)

// AppInstanceRequest launches an app version (POST …/app-instances).
// OperatingMode and ControlPlaneScope are hints: read the effective values
// back from the answer.
type AppInstanceRequest struct {
	AppSlug            string           `json:"app_slug"`
	Version            string           `json:"version"`
	DisplayName        string           `json:"display_name"`
	OperatingMode      string           `json:"operating_mode,omitempty"`
	ControlPlaneScope  string           `json:"control_plane_scope,omitempty"`
	Config             json.RawMessage  `json:"config,omitempty"`
	PlacementIntent    json.RawMessage  `json:"placement_intent,omitempty"`
	TargetAllocationID string           `json:"target_allocation_id,omitempty"`
	Resources          *LaunchResources `json:"resources,omitempty"`
	Parameters         json.RawMessage  `json:"parameters,omitempty"`
}

// LaunchResources are launch-time resource inputs; nil keeps the default.
type LaunchResources struct {
	GPUCount  *int `json:"gpu_count,omitempty"`
	CPUCores  *int `json:"cpu_cores,omitempty"`
	MemoryGiB *int `json:"memory_gib,omitempty"`
	HostPort  *int `json:"host_port,omitempty"`
}

// AppInstanceAccess says how to reach an instance's private endpoint.
type AppInstanceAccess struct {
	Exposure     string                `json:"exposure"`      // private_host_local | external_worker
	URL          string                `json:"url,omitempty"` // external_worker: where the worker says the app answers
	NodeID       string                `json:"node_id"`
	NodeAddress  string                `json:"node_address,omitempty"`
	HostPort     int                   `json:"host_port"`
	LocalURL     string                `json:"local_url"`
	SSHTunnel    string                `json:"ssh_tunnel,omitempty"`
	Instructions string                `json:"instructions"`
	BindAddress  string                `json:"bind_address,omitempty"`
	Ports        []nodeapi.PortMapping `json:"ports,omitempty"` // every published port, host as bound
}

// Operation is one lifecycle request, polled by id.
type Operation struct {
	ID            string `json:"id"`
	AppInstanceID string `json:"app_instance_id"`
	ProjectID     string `json:"project_id"`
	Kind          string `json:"kind"`
	State         string `json:"state"` // in_progress | succeeded | failed
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

// AppInstance is an app instance as the server decided it.
type AppInstance struct {
	ID                 string          `json:"id"`
	OrgID              string          `json:"org_id"`
	ProjectID          string          `json:"project_id"`
	AppSlug            string          `json:"app_slug"`
	Version            string          `json:"version"`
	Digest             string          `json:"digest"`
	DisplayName        string          `json:"display_name"`
	Status             string          `json:"status"`
	ReasonCode         string          `json:"reason_code"`
	ReasonMessage      string          `json:"reason_message"`
	OperatingMode      string          `json:"operating_mode"`
	ControlPlaneScope  string          `json:"control_plane_scope"`
	RuntimeBackend     string          `json:"runtime_backend"`
	TenantBoundaryMode string          `json:"tenant_boundary_mode"`
	Resources          map[string]int  `json:"resources"`
	Config             json.RawMessage `json:"config"`
	PlacementIntent    json.RawMessage `json:"placement_intent"`
	Parameters         json.RawMessage `json:"parameters"`
	TargetAllocationID string          `json:"target_allocation_id"`
	// GPUUUIDs are the GPUs of the allocation the instance was given;
	// absent when it asked for none.
	GPUUUIDs         []string           `json:"gpu_uuids,omitempty"`
	NodeID           string             `json:"node_id"`
	ServiceAccountID string             `json:"service_account_id"`
	Access           *AppInstanceAccess `json:"access"`
	VersionHistory   []struct {
		Version string `json:"version"`
		Digest  string `json:"digest"`
	} `json:"version_history"`
	CurrentOperationID string     `json:"current_operation_id"`
	CreatedBy          string     `json:"created_by"`
	CreatedAt          string     `json:"created_at"`
	UpdatedAt          string     `json:"updated_at"`
	DecommissionedAt   string     `json:"decommissioned_at,omitempty"`
	OperationID        string     `json:"operation_id,omitempty"`
	Operation          *Operation `json:"operation,omitempty"`
	// Health is what the workload reports about itself (runtime events).
	Health AppInstanceHealth `json:"health"`
}

// AppInstanceHealth is an instance's runtime health: unknown, healthy,
// unhealthy, or degraded (its heartbeat is late).
type AppInstanceHealth struct {
	State                   string `json:"state"`
	Reason                  string `json:"reason,omitempty"`
	ChangedAt               string `json:"changed_at,omitempty"`
	LastHeartbeatAt         string `json:"last_heartbeat_at,omitempty"`
	HeartbeatTimeoutSeconds int    `json:"heartbeat_timeout_seconds,omitempty"`
	HeartbeatDueAt          string `json:"heartbeat_due_at,omitempty"`
}

// Runtime event types a workload reports about its own instance.
const (
	RuntimeHeartbeat      = "heartbeat"
	RuntimeStartCompleted = "start_completed"
	RuntimeHealthy        = "healthy"
	RuntimeUnhealthy      = "unhealthy"
	RuntimeMemberAdded    = "member_added"
	RuntimeMemberRemoved  = "member_removed"
	RuntimeMemberFailed   = "member_failed"
)

// RuntimeEvent is one runtime event to report (ReportRuntimeEvents builds
// the CloudEvents). ID and Source identify it: a repeat is recognised.
type RuntimeEvent struct {
	ID, Source, Type string
	Time             time.Time // when it happened; zero: now
	Health           string    // heartbeat only: healthy or unhealthy
	Reason, Message  string
	Member, Role     string // member_* only
}

// RuntimeCloudEvent is a runtime event as it travels: a CloudEvents 1.0
// envelope.
type RuntimeCloudEvent struct {
	SpecVersion     string            `json:"specversion"` // 1.0
	ID              string            `json:"id"`
	Source          string            `json:"source"`
	Type            string            `json:"type"`
	Subject         string            `json:"subject,omitempty"`
	Time            string            `json:"time,omitempty"`
	DataContentType string            `json:"datacontenttype,omitempty"`
	ProjectID       string            `json:"projectid,omitempty"`
	CorrelationID   string            `json:"correlationid,omitempty"`
	Data            *RuntimeEventData `json:"data,omitempty"`
}

// RuntimeEventData is what a runtime event says beyond its type.
type RuntimeEventData struct {
	Health  string `json:"health,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Member  string `json:"member,omitempty"`
	Role    string `json:"role,omitempty"`
}

// RuntimeEventReport answers a runtime-event post.
type RuntimeEventReport struct {
	Recorded   int    `json:"recorded"`
	Duplicates int    `json:"duplicates"`
	Applied    int    `json:"applied"`
	Health     string `json:"health"`
	Results    []struct {
		ID     string `json:"id"`
		Source string `json:"source"`
		Status string `json:"status"` // recorded | duplicate | applied
	} `json:"results"`
}

// ReportRuntimeEvents posts events as one CloudEvents batch about the
// caller's own instance; only the instance's own identity may. The answer
// comes after the events are committed. Past the server's per-instance
// rate (every event counts, heartbeats too) it fails with 429
// runtime_events_rate_limited and nothing is recorded: retry the same
// events after the *APIError's Details["retry_after_seconds"] seconds.
// The server records every event but a heartbeat once by its source and
// id, so a RetryPolicy sends a batch without heartbeats again after a 503;
// a heartbeat takes effect again each time it comes (a resent one could
// undo a later event of its batch), so a batch holding one is not.
//
// Operation: reportRuntimeEvents
func (c *Client) ReportRuntimeEvents(ctx context.Context, projectID, instanceID string, events []RuntimeEvent) (RuntimeEventReport, error) {
	batch := make([]RuntimeCloudEvent, len(events))
	for i, e := range events {
		ev := RuntimeCloudEvent{SpecVersion: "1.0", ID: e.ID, Source: e.Source, Type: e.Type, Subject: instanceID,
			DataContentType: "application/json"}
		if !e.Time.IsZero() {
			ev.Time = e.Time.UTC().Format(time.RFC3339Nano)
		}
		if d := (RuntimeEventData{Health: e.Health, Reason: e.Reason, Message: e.Message, Member: e.Member, Role: e.Role}); d != (RuntimeEventData{}) {
			ev.Data = &d
		}
		batch[i] = ev
	}
	var opts []RequestOption
	if !slices.ContainsFunc(events, func(e RuntimeEvent) bool { return e.Type == RuntimeHeartbeat }) {
		opts = append(opts, dedupedByEventID)
	}
	var out RuntimeEventReport
	return out, c.postCloudEvents(ctx, instancePath(projectID, instanceID)+"/runtime-events", batch, &out, 16<<20, opts...)
}

// AppInstanceList is one page of instances.
type AppInstanceList struct {
	Items      []AppInstance `json:"items"`
	NextCursor string        `json:"next_cursor"`
}

// AppInstanceEvent is one row of an instance's timeline.
type AppInstanceEvent struct {
	ID            string          `json:"id"`
	AppInstanceID string          `json:"app_instance_id"`
	EventType     string          `json:"event_type"`
	Status        string          `json:"status"`
	OperationID   string          `json:"operation_id"`
	CorrelationID string          `json:"correlation_id"`
	Payload       json.RawMessage `json:"payload"`
	OccurredAt    string          `json:"occurred_at"`
}

// AppInstanceEventList is one page of an instance's timeline.
type AppInstanceEventList struct {
	Items      []AppInstanceEvent `json:"items"`
	NextCursor string             `json:"next_cursor"`
}

// AppInstanceLogs are the workload's last log lines.
type AppInstanceLogs struct {
	AppInstanceID string   `json:"app_instance_id"`
	Status        string   `json:"status"`
	ReasonCode    string   `json:"reason_code"`
	Lines         []string `json:"lines"`
}

func instancesPath(projectID string) string {
	return "/api/v1/projects/" + url.PathEscape(projectID) + "/app-instances"
}

func instancePath(projectID, id string) string {
	return instancesPath(projectID) + "/" + url.PathEscape(id)
}

// CreateAppInstance launches an instance; the answer is 202 with the
// operation that drives it.
//
// Operation: createAppInstance
func (c *Client) CreateAppInstance(ctx context.Context, projectID string, in AppInstanceRequest, opts ...RequestOption) (AppInstance, error) {
	var out AppInstance
	err := c.Do(ctx, http.MethodPost, instancesPath(projectID), nil, in, &out, opts...)
	return out, err
}

// ListAppInstances lists a project's instances (status "" for all).
//
// Operation: listAppInstances
func (c *Client) ListAppInstances(ctx context.Context, projectID, status string, limit int, cursor string) (AppInstanceList, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out AppInstanceList
	err := c.Do(ctx, http.MethodGet, instancesPath(projectID), q, nil, &out)
	return out, err
}

// GetAppInstance reads one instance.
//
// Operation: getAppInstance
func (c *Client) GetAppInstance(ctx context.Context, projectID, id string) (AppInstance, error) {
	var out AppInstance
	err := c.Do(ctx, http.MethodGet, instancePath(projectID, id), nil, nil, &out)
	return out, err
}

// UpgradeAppInstance and RollbackAppInstance move an instance to
// targetVersion; DecommissionAppInstance tears it down. Each answers 202
// with its operation.
//
// Operation: upgradeAppInstance
func (c *Client) UpgradeAppInstance(ctx context.Context, projectID, id, targetVersion string, opts ...RequestOption) (AppInstance, error) {
	return c.instanceAction(ctx, projectID, id, "upgrade", targetVersionRequest{TargetVersion: targetVersion}, opts)
}

// RollbackAppInstance: see UpgradeAppInstance.
//
// Operation: rollbackAppInstance
func (c *Client) RollbackAppInstance(ctx context.Context, projectID, id, targetVersion string, opts ...RequestOption) (AppInstance, error) {
	return c.instanceAction(ctx, projectID, id, "rollback", targetVersionRequest{TargetVersion: targetVersion}, opts)
}

// DecommissionAppInstance: see UpgradeAppInstance.
//
// Operation: decommissionAppInstance
func (c *Client) DecommissionAppInstance(ctx context.Context, projectID, id string, opts ...RequestOption) (AppInstance, error) {
	return c.instanceAction(ctx, projectID, id, "decommission", nil, opts)
}

type targetVersionRequest struct {
	TargetVersion string `json:"target_version"`
}

func (c *Client) instanceAction(ctx context.Context, projectID, id, action string, in any, opts []RequestOption) (AppInstance, error) {
	var out AppInstance
	err := c.Do(ctx, http.MethodPost, instancePath(projectID, id)+"/"+action, nil, in, &out, opts...)
	return out, err
}

// AppInstanceEvents reads a page of an instance's timeline.
//
// Operation: listAppInstanceEvents
func (c *Client) AppInstanceEvents(ctx context.Context, projectID, id string, limit int, cursor string) (AppInstanceEventList, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out AppInstanceEventList
	err := c.Do(ctx, http.MethodGet, instancePath(projectID, id)+"/events", q, nil, &out)
	return out, err
}

// AppInstanceLogs reads the workload's last log lines.
//
// Operation: getAppInstanceLogs
func (c *Client) AppInstanceLogs(ctx context.Context, projectID, id string) (AppInstanceLogs, error) {
	var out AppInstanceLogs
	err := c.Do(ctx, http.MethodGet, instancePath(projectID, id)+"/logs", nil, nil, &out)
	return out, err
}

// GetOperation reads one operation.
//
// Operation: getOperation
func (c *Client) GetOperation(ctx context.Context, projectID, id string) (Operation, error) {
	var out Operation
	err := c.Do(ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(projectID)+"/operations/"+url.PathEscape(id), nil, nil, &out)
	return out, err
}

// AppInstanceMember is one workload an instance runs (or ran) on its node.
type AppInstanceMember struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"` // an added member's name (worker-1)
	// Added: a member added by AddAppInstanceMembers; false: a workload of
	// the instance's own deployment.
	Added         bool     `json:"added"`
	AllocationID  string   `json:"allocation_id"`
	NodeID        string   `json:"node_id"`
	Role          string   `json:"role"`
	Status        string   `json:"status"` // deploying | running | failed | removed
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

// AddMembersRequest adds Count members of Role on an allocation of the
// project (empty: the instance's own).
type AddMembersRequest struct {
	Role         string `json:"role"`
	AllocationID string `json:"allocation_id,omitempty"`
	Count        int    `json:"count,omitempty"`
}

// MemberOperation is the answer to a member request: the operation that
// acts and the members it acts on.
type MemberOperation struct {
	AppInstanceID string              `json:"app_instance_id"`
	OperationID   string              `json:"operation_id"`
	Operation     Operation           `json:"operation"`
	Members       []AppInstanceMember `json:"members"`
}

// AddAppInstanceMembers adds members (workers, heads, nodes) to a running
// instance whose version declares them; follow the operation.
//
// Operation: addAppInstanceMembers
func (c *Client) AddAppInstanceMembers(ctx context.Context, projectID, id string, in AddMembersRequest, opts ...RequestOption) (MemberOperation, error) {
	var out MemberOperation
	return out, c.Do(ctx, http.MethodPost, instancePath(projectID, id)+"/members", nil, in, &out, opts...)
}

// RemoveAppInstanceMember removes an added member; its removal is verified
// on its node.
//
// Operation: removeAppInstanceMember
func (c *Client) RemoveAppInstanceMember(ctx context.Context, projectID, id, memberID string, opts ...RequestOption) (MemberOperation, error) {
	var out MemberOperation
	return out, c.Do(ctx, http.MethodPost, instancePath(projectID, id)+"/members/"+url.PathEscape(memberID)+"/remove", nil, nil, &out, opts...)
}

// RecoverAppInstanceMember redeploys a failed member where it was.
//
// Operation: recoverAppInstanceMember
func (c *Client) RecoverAppInstanceMember(ctx context.Context, projectID, id, memberID string, opts ...RequestOption) (MemberOperation, error) {
	var out MemberOperation
	return out, c.Do(ctx, http.MethodPost, instancePath(projectID, id)+"/members/"+url.PathEscape(memberID)+"/recover", nil, nil, &out, opts...)
}

// ListAppInstanceMembers lists the workloads an instance runs (or ran).
//
// Operation: listAppInstanceMembers
func (c *Client) ListAppInstanceMembers(ctx context.Context, projectID, id string, o CatalogListOptions) (CatalogPage[AppInstanceMember], error) {
	var out CatalogPage[AppInstanceMember]
	return out, c.Do(ctx, http.MethodGet, instancePath(projectID, id)+"/members", o.query(), nil, &out)
}

// UIOpen is a one-time link to a running instance's UI through the UI
// gateway, valid for a minute and redeemable once.
type UIOpen struct {
	Code          string `json:"code"` // empty in an idempotent replay
	AppInstanceID string `json:"app_instance_id"`
	URL           string `json:"url"` // open it in the person's browser
	ExpiresAt     string `json:"expires_at"`
}

// OpenAppInstanceUI asks for a one-time link to an instance's UI (people
// only).
//
// Operation: openAppInstanceUI
func (c *Client) OpenAppInstanceUI(ctx context.Context, projectID, id string, opts ...RequestOption) (UIOpen, error) {
	var out UIOpen
	return out, c.Do(ctx, http.MethodPost, instancePath(projectID, id)+"/ui-open", nil, nil, &out, opts...)
}

// AppInstanceEventData is the data of an apps.instance.* event.
type AppInstanceEventData struct {
	AppInstanceID string   `json:"app_instance_id"`
	Status        string   `json:"status"`
	Version       string   `json:"version"`
	Digest        string   `json:"digest"`
	OperationID   string   `json:"operation_id"`
	ReasonCode    string   `json:"reason_code"`
	Reason        string   `json:"reason"`
	LogTail       []string `json:"log_tail"`
	CorrelationID string   `json:"correlation_id"`
}

var errOperationEnded = errors.New("operation ended")

// WaitOperation follows an instance's events from the project's event
// stream, calling onEvent for each (live progress), until the operation
// ends; it returns the operation as it ended. The operation is also polled
// now and then, so a stream that is slow to start cannot hold it up.
func (c *Client) WaitOperation(ctx context.Context, projectID, instanceID, operationID string, onEvent func(Event, AppInstanceEventData)) (Operation, error) {
	op, err := c.GetOperation(ctx, projectID, operationID)
	if err != nil || op.State != "in_progress" {
		return op, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	done := func() bool {
		o, err := c.GetOperation(ctx, projectID, operationID)
		if err != nil {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		op = o
		return o.State != "in_progress"
	}
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if done() {
					cancel()
					return
				}
			}
		}
	}()
	err = c.FollowEvents(ctx, ProjectEventsPath(projectID), EventFilter{Subject: "app-instances/" + instanceID}, "", func(e Event) error {
		var d AppInstanceEventData
		_ = json.Unmarshal(e.Data, &d)
		if d.OperationID != operationID {
			return nil // the instance's earlier operations: not this one's progress
		}
		if onEvent != nil {
			onEvent(e, d)
		}
		if d.OperationID == operationID && done() {
			return errOperationEnded
		}
		return nil
	})
	if errors.Is(err, errOperationEnded) {
		err = nil
	}
	mu.Lock()
	defer mu.Unlock()
	if err == nil && op.State == "in_progress" {
		err = ctx.Err()
		if err == nil {
			err = errors.New("event stream ended before the operation did")
		}
	}
	return op, err
}

// AppInstanceAttachment lets another project of the org use a
// tenant-shared instance.
type AppInstanceAttachment struct {
	AppInstanceID string `json:"app_instance_id"`
	ProjectID     string `json:"project_id"` // the attached project
	OrgID         string `json:"org_id"`
	AttachedBy    string `json:"attached_by"`
	CreatedAt     string `json:"created_at"`
}

type attachRequest struct {
	ProjectID string `json:"project_id"`
}

// AttachAppInstanceProject lets project attachedProjectID use a
// tenant-shared instance of projectID (an org-level role).
//
// Operation: attachAppInstanceProject
func (c *Client) AttachAppInstanceProject(ctx context.Context, projectID, id, attachedProjectID string, opts ...RequestOption) (AppInstanceAttachment, error) {
	var out AppInstanceAttachment
	return out, c.Do(ctx, http.MethodPost, instancePath(projectID, id)+"/attachments", nil, attachRequest{ProjectID: attachedProjectID}, &out, opts...)
}

// DetachAppInstanceProject takes a project's use of a shared instance away.
//
// Operation: detachAppInstanceProject
func (c *Client) DetachAppInstanceProject(ctx context.Context, projectID, id, attachedProjectID string) error {
	return c.Do(ctx, http.MethodDelete, instancePath(projectID, id)+"/attachments/"+url.PathEscape(attachedProjectID), nil, nil, nil)
}

// ListAppInstanceAttachments lists the projects a shared instance is
// attached to.
//
// Operation: listAppInstanceAttachments
func (c *Client) ListAppInstanceAttachments(ctx context.Context, projectID, id string) (CatalogPage[AppInstanceAttachment], error) {
	var out CatalogPage[AppInstanceAttachment]
	return out, c.Do(ctx, http.MethodGet, instancePath(projectID, id)+"/attachments", nil, nil, &out)
}
