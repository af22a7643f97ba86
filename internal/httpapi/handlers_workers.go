package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/instances"
)

type appWorkerGrantView struct {
	AppSlug          string `json:"app_slug"`
	ServiceAccountID string `json:"service_account_id"`
	ProjectID        string `json:"project_id"`
	GrantedBy        string `json:"granted_by"`
	CreatedAt        string `json:"created_at"`
}

func viewWorkerGrant(g instances.AppWorkerGrant) appWorkerGrantView {
	return appWorkerGrantView{AppSlug: g.AppSlug, ServiceAccountID: g.ServiceAccountID, ProjectID: g.ProjectID, GrantedBy: g.GrantedBy,
		CreatedAt: rfc3339(g.CreatedAt)}
}

func (a *API) listAppWorkers(w http.ResponseWriter, r *http.Request) error {
	p, err := page(r)
	if err != nil {
		return err
	}
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	gs, next, err := svc.WorkerGrants(r.Context(), grantsFrom(r.Context()), r.PathValue("app_slug"), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(gs, next, viewWorkerGrant))
	return nil
}

func (a *API) grantAppWorker(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	g, err := svc.GrantWorker(r.Context(), grantsFrom(r.Context()), r.PathValue("app_slug"), r.PathValue("service_account_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewWorkerGrant(g))
	return nil
}

func (a *API) revokeAppWorker(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	if err := svc.RevokeWorker(r.Context(), grantsFrom(r.Context()), r.PathValue("app_slug"), r.PathValue("service_account_id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// workerOperationView is an acquired operation as its worker sees it.
type workerOperationView struct {
	OperationID        string                     `json:"operation_id"`
	LeaseID            string                     `json:"lease_id"`
	ExpiresAt          string                     `json:"expires_at"`
	DeadlineAt         string                     `json:"deadline_at"`
	Kind               string                     `json:"kind"`
	Attempt            int                        `json:"attempt"`
	AppInstanceID      string                     `json:"app_instance_id"`
	ProjectID          string                     `json:"project_id"`
	OrgID              string                     `json:"org_id"`
	AppSlug            string                     `json:"app_slug"`
	DisplayName        string                     `json:"display_name"`
	Version            string                     `json:"version"`
	FromVersion        string                     `json:"from_version"`
	TargetVersion      string                     `json:"target_version"`
	TargetAllocationID string                     `json:"target_allocation_id"`
	NodeID             string                     `json:"node_id"`
	Effective          json.RawMessage            `json:"effective"`
	Artifacts          []instances.WorkerArtifact `json:"artifacts"`
	Contract           any                        `json:"contract"`
	State              json.RawMessage            `json:"state"`
	Members            []instanceMemberView       `json:"members"`
}

func viewWorkerTask(t instances.WorkerTask) workerOperationView {
	var doc instances.LaunchDoc
	_ = json.Unmarshal(t.Instance.Effective, &doc)
	eff, _ := json.Marshal(doc.Effective)
	state := json.RawMessage("null")
	if len(t.State) > 0 {
		state = t.State
	}
	arts := t.Artifacts
	if arts == nil {
		arts = []instances.WorkerArtifact{}
	}
	var contract any = map[string]any{}
	if t.Contract != nil {
		contract = t.Contract
	}
	return workerOperationView{OperationID: t.Op.ID, LeaseID: t.Op.LeaseID, ExpiresAt: rfc3339(t.Op.LeaseExpiresAt), DeadlineAt: rfc3339(t.Op.DeadlineAt),
		Kind: string(t.Op.Kind), Attempt: t.Op.Attempt, AppInstanceID: t.Instance.ID, ProjectID: t.Instance.ProjectID, OrgID: t.Instance.OrgID,
		AppSlug: t.Instance.AppSlug, DisplayName: t.Instance.DisplayName, Version: t.Instance.Version, FromVersion: t.Op.FromVersion,
		TargetVersion: t.Op.TargetVersion, TargetAllocationID: t.Instance.TargetAllocationID, NodeID: t.Instance.NodeID,
		Effective: eff, Artifacts: arts, Contract: contract, State: state, Members: mapList(t.Members, "", viewMember).Items}
}

func (a *API) acquireWorkerOperation(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		WaitSeconds int `json:"wait_seconds"`
	}
	if err := decode(r, &in); err != nil {
		return err
	}
	if in.WaitSeconds < 0 || in.WaitSeconds > int(instances.MaxWorkerWait.Seconds()) {
		return errdefs.Validation([]errdefs.FieldError{{Field: "/wait_seconds", Code: "out_of_range",
			Message: "must be from 0 to " + strconv.Itoa(int(instances.MaxWorkerWait.Seconds()))}})
	}
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	t, ok, err := svc.Acquire(r.Context(), r.PathValue("app_slug"), time.Duration(in.WaitSeconds)*time.Second)
	if err != nil {
		return err
	}
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(instances.RetryAfter().Seconds())))
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	writeJSON(w, http.StatusOK, viewWorkerTask(t))
	return nil
}

type workerLeaseView struct {
	OperationID string `json:"operation_id"`
	LeaseID     string `json:"lease_id"`
	ExpiresAt   string `json:"expires_at"`
	Cancelled   bool   `json:"cancelled"`
}

func (a *API) heartbeatWorkerOperation(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		LeaseID string `json:"lease_id"`
		Message string `json:"message"`
	}
	if err := decode(r, &in); err != nil {
		return err
	}
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	l, err := svc.Heartbeat(r.Context(), r.PathValue("app_slug"), r.PathValue("operation_id"), in.LeaseID, in.Message)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, workerLeaseView{OperationID: l.OperationID, LeaseID: l.LeaseID, ExpiresAt: rfc3339(l.ExpiresAt), Cancelled: l.Cancelled})
	return nil
}

func (a *API) finishWorkerOperation(failing bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var in instances.WorkerResult
		if err := decode(r, &in); err != nil {
			return err
		}
		if !failing && (in.ReasonCode != "" || in.Message != "") {
			return errdefs.Validation([]errdefs.FieldError{{Field: "/reason_code", Code: "unexpected", Message: "a complete carries no reason; use …/fail"}})
		}
		if failing && in.AccessURL != "" {
			return errdefs.Validation([]errdefs.FieldError{{Field: "/access_url", Code: "unexpected", Message: "a failed operation has no access URL"}})
		}
		svc, err := a.instancesService()
		if err != nil {
			return err
		}
		act := svc.Complete
		if failing {
			act = svc.Fail
		}
		op, err := act(r.Context(), r.PathValue("app_slug"), r.PathValue("operation_id"), in)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, viewOperation(op))
		return nil
	}
}
