package client

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"
)

// The external worker contract: an app version whose runtime is driven by
// a worker outside the platform (runtime_backend slurm, ray or bare_metal
// with an external_worker_contract). A platform admin grants a service
// account to the app; the account's worker then acquires each lifecycle
// operation of the app's instances under a lease, heartbeats it, and
// completes or fails it. docs/external-workers.md.

// AppWorkerGrant lets a service account (of any project) work the
// operations of one app.
type AppWorkerGrant struct {
	AppSlug          string `json:"app_slug"`
	ServiceAccountID string `json:"service_account_id"`
	ProjectID        string `json:"project_id"` // the service account's project
	GrantedBy        string `json:"granted_by"`
	CreatedAt        string `json:"created_at"`
}

// WorkerArtifact is an artifact of the instance's target version.
type WorkerArtifact struct {
	Name       string `json:"name"`
	Repository string `json:"repository"`
	Digest     string `json:"digest"`
}

// WorkerOperation is a lifecycle operation leased to the calling worker:
// what to do (Kind) to which instance, and the lease that lets it report.
type WorkerOperation struct {
	OperationID string `json:"operation_id"`
	LeaseID     string `json:"lease_id"`
	ExpiresAt   string `json:"expires_at"`  // the lease's end (RFC 3339): heartbeat before it
	DeadlineAt  string `json:"deadline_at"` // the operation fails with operation_timeout past it
	Kind        string `json:"kind"`        // create | upgrade | rollback | decommission | cleanup | member_add | member_remove | member_recover
	Attempt     int    `json:"attempt"`     // how many times it has been leased, this time included

	AppInstanceID      string `json:"app_instance_id"`
	ProjectID          string `json:"project_id"`
	OrgID              string `json:"org_id"`
	AppSlug            string `json:"app_slug"`
	DisplayName        string `json:"display_name"`
	Version            string `json:"version"` // the instance's current version
	FromVersion        string `json:"from_version"`
	TargetVersion      string `json:"target_version"`
	TargetAllocationID string `json:"target_allocation_id"`
	NodeID             string `json:"node_id"`

	// Effective are the instance's effective launch values.
	Effective json.RawMessage  `json:"effective"`
	Artifacts []WorkerArtifact `json:"artifacts"`
	// Contract is the version's external_worker_contract as registered.
	Contract json.RawMessage `json:"contract"`
	// State is what the instance's previous operation completed or failed
	// with (null for the first): the worker's own, opaque to the platform.
	State json.RawMessage `json:"state"`
	// Members: for a member operation (a child operation), the members it
	// acts on — bring them up (member_add, member_recover) or take them
	// down (member_remove). For the instance's own operations, its live
	// members: an upgrade or rollback carries them along, a decommission
	// takes them down too.
	Members []AppInstanceMember `json:"members"`
}

// WorkerLease answers a heartbeat: the lease, extended.
type WorkerLease struct {
	OperationID string `json:"operation_id"`
	LeaseID     string `json:"lease_id"`
	ExpiresAt   string `json:"expires_at"`
	// Cancelled: the operation is no longer wanted; stop and fail it with
	// reason cancelled.
	Cancelled bool `json:"cancelled"`
}

type acquireRequest struct {
	WaitSeconds int `json:"wait_seconds"`
}

// WorkerHeartbeatRequest extends a lease; Message says how the work goes.
type WorkerHeartbeatRequest struct {
	LeaseID string `json:"lease_id"`
	Message string `json:"message"`
}

// WorkerCompleteRequest completes a leased operation. State, when set,
// replaces the instance's state and is handed to its next operation.
type WorkerCompleteRequest struct {
	LeaseID   string          `json:"lease_id"`
	State     json.RawMessage `json:"state,omitempty"`
	AccessURL string          `json:"access_url,omitempty"`
}

// WorkerFailRequest fails a leased operation with a reason code
// (^[a-z][a-z0-9_]{0,63}$) and a message for people.
type WorkerFailRequest struct {
	LeaseID    string          `json:"lease_id"`
	ReasonCode string          `json:"reason_code"`
	Message    string          `json:"message"`
	State      json.RawMessage `json:"state"`
}

func appWorkersPath(appSlug string) string {
	return "/api/v1/admin/apps/" + url.PathEscape(appSlug) + "/workers"
}

func workerOperationPath(appSlug, operationID, action string) string {
	return "/api/v1/apps/" + url.PathEscape(appSlug) + "/worker/operations/" + url.PathEscape(operationID) + "/" + action
}

// GrantAppWorker lets a service account work the app's operations
// (platform admins). Granting again is a no-op.
//
// Operation: grantAppWorker
func (c *Client) GrantAppWorker(ctx context.Context, appSlug, serviceAccountID string) (AppWorkerGrant, error) {
	var out AppWorkerGrant
	return out, c.Do(ctx, http.MethodPut, appWorkersPath(appSlug)+"/"+url.PathEscape(serviceAccountID), nil, nil, &out)
}

// RevokeAppWorker withdraws a grant; the account acquires nothing more of
// the app.
//
// Operation: revokeAppWorker
func (c *Client) RevokeAppWorker(ctx context.Context, appSlug, serviceAccountID string) error {
	return c.Do(ctx, http.MethodDelete, appWorkersPath(appSlug)+"/"+url.PathEscape(serviceAccountID), nil, nil, nil)
}

// ListAppWorkers lists the service accounts granted to an app.
//
// Operation: listAppWorkers
func (c *Client) ListAppWorkers(ctx context.Context, appSlug string, o CatalogListOptions) (CatalogPage[AppWorkerGrant], error) {
	var out CatalogPage[AppWorkerGrant]
	return out, c.Do(ctx, http.MethodGet, appWorkersPath(appSlug), o.query(), nil, &out)
}

// AcquireWorkerOperation leases the app's next pending operation to the
// calling worker, waiting up to waitSeconds (0 to 20) for one. When none
// comes, ok is false and retryAfter is how long the server asks to wait
// before polling again (0 when it does not say). A worker that already
// holds an unexpired lease gets that operation back, same lease id: how a
// restarted worker finds the work it was doing.
//
// Operation: acquireWorkerOperation
func (c *Client) AcquireWorkerOperation(ctx context.Context, appSlug string, waitSeconds int) (op WorkerOperation, ok bool, retryAfter time.Duration, err error) {
	// c.Do hides the status and headers, and 204 is the answer that
	// matters here: the same request, read by hand.
	body, err := json.Marshal(acquireRequest{WaitSeconds: waitSeconds})
	if err != nil {
		return op, false, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/api/v1/apps/"+url.PathEscape(appSlug)+"/worker/acquire", bytes.NewReader(body))
	if err != nil {
		return op, false, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	c.authorize(req)
	req.Header.Set("X-Idempotency-Key", uuid.NewString())
	resp, err := c.roundTrip(req)
	if err != nil {
		return op, false, 0, err
	}
	if resp.StatusCode == http.StatusNoContent {
		_ = resp.Body.Close()
		return op, false, parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), nil
	}
	if err := decodeResponse(req, resp, &op, 16<<20); err != nil {
		return op, false, 0, err
	}
	return op, true, 0, nil
}

// HeartbeatWorkerOperation extends the lease and reports progress. An
// *APIError with code lease_lost means the lease is no longer the
// caller's: stop working on the operation. Cancelled in the answer means
// the operation is no longer wanted.
//
// Operation: heartbeatWorkerOperation
func (c *Client) HeartbeatWorkerOperation(ctx context.Context, appSlug, operationID, leaseID, message string) (WorkerLease, error) {
	var out WorkerLease
	return out, c.Do(ctx, http.MethodPost, workerOperationPath(appSlug, operationID, "heartbeat"), nil,
		WorkerHeartbeatRequest{LeaseID: leaseID, Message: message}, &out)
}

// CompleteWorkerOperation reports a leased operation done, with the state
// to keep for the instance's next operation. Repeating it with the same
// lease gets the same answer, so a lost answer can be retried.
//
// Operation: completeWorkerOperation
func (c *Client) CompleteWorkerOperation(ctx context.Context, appSlug, operationID string, in WorkerCompleteRequest) (Operation, error) {
	var out Operation
	return out, c.Do(ctx, http.MethodPost, workerOperationPath(appSlug, operationID, "complete"), nil, in, &out)
}

// FailWorkerOperation reports a leased operation failed, with a reason
// code and message.
//
// Operation: failWorkerOperation
func (c *Client) FailWorkerOperation(ctx context.Context, appSlug, operationID string, in WorkerFailRequest) (Operation, error) {
	var out Operation
	return out, c.Do(ctx, http.MethodPost, workerOperationPath(appSlug, operationID, "fail"), nil, in, &out)
}
