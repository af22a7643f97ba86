package instances

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// VersionInput is the body of upgrade and rollback.
type VersionInput struct {
	TargetVersion string `json:"target_version"`
}

func errInstanceNotFound(id string) error {
	return errdefs.NotFound(instanceNotFoundErrorCode, "app instance %q does not exist in this project", id)
}

func errBusy(inst AppInstance) error {
	return errdefs.Conflict(operationInProgressCode,
		"app instance %s is %s: operation %s is still in progress; follow it with gpuaas instance get %s --project %s (GET /api/v1/projects/%s/operations/%s) and retry when it ends",
		inst.ID, inst.Status, inst.CurrentOperationID, inst.ID, inst.ProjectID, inst.ProjectID, inst.CurrentOperationID).
		WithDetails(map[string]any{"operation_id": inst.CurrentOperationID, "status": inst.Status})
}

// instance resolves a project the caller may act on with perm, and one of
// its instances; another project's instance is not found. A tenant-shared
// instance (attachments.go) is also read through the projects attached to
// it, and changed only with perm at its org.
func (s *Service) instance(ctx context.Context, g *iam.Grants, projectID, id, perm string) (iam.Project, AppInstance, error) {
	p, err := s.IAM.Project(ctx, g, projectID, perm)
	if err != nil {
		return iam.Project{}, AppInstance{}, err
	}
	q := s.Store.Read()
	inst, err := q.GetAppInstance(ctx, p.ID, id)
	if errors.Is(err, storage.ErrNotFound) && perm == iam.PermInstanceRead {
		if attached, aerr := q.InstanceAttached(ctx, id, p.ID); aerr != nil || attached {
			if aerr != nil {
				return iam.Project{}, AppInstance{}, aerr
			}
			inst, err = q.GetAppInstanceByID(ctx, id)
		}
	}
	if errors.Is(err, storage.ErrNotFound) {
		return iam.Project{}, AppInstance{}, errInstanceNotFound(id)
	}
	if err != nil {
		return iam.Project{}, AppInstance{}, err
	}
	if perm != iam.PermInstanceRead && tenantShared(inst) {
		if err := s.sharedRole(ctx, g, inst.OrgID, inst.OperatingMode, inst.ID, perm); err != nil {
			return iam.Project{}, AppInstance{}, err
		}
	}
	return p, inst, nil
}

// Upgrade moves a running instance to another published, entitled and
// compatible version. The worker deploys it health-gated and reverts to
// the current version if the new one does not become ready.
func (s *Service) Upgrade(ctx context.Context, g *iam.Grants, projectID, id string, in VersionInput) (AppInstance, InstanceOperation, error) {
	return s.changeVersion(ctx, g, projectID, id, in, OpUpgrade)
}

// Rollback moves a running instance back to a version it ran
// before; a deprecated version is allowed, a retired one is not.
func (s *Service) Rollback(ctx context.Context, g *iam.Grants, projectID, id string, in VersionInput) (AppInstance, InstanceOperation, error) {
	return s.changeVersion(ctx, g, projectID, id, in, OpRollback)
}

func (s *Service) changeVersion(ctx context.Context, g *iam.Grants, projectID, id string, in VersionInput, kind OperationKind) (AppInstance, InstanceOperation, error) {
	p, inst, err := s.instance(ctx, g, projectID, id, iam.PermInstanceUpdate)
	if err != nil {
		return AppInstance{}, InstanceOperation{}, err
	}
	if busy(inst.Status) {
		return AppInstance{}, InstanceOperation{}, errBusy(inst)
	}
	if inst.Status != StatusRunning {
		return AppInstance{}, InstanceOperation{}, errdefs.FailedPrecondition("instance_not_running",
			"app instance %s is %s; only a running instance can be %sd", inst.ID, inst.Status, strings.ReplaceAll(string(kind), "rollback", "rolled back"))
	}
	in.TargetVersion = strings.TrimSpace(in.TargetVersion)
	if in.TargetVersion == "" {
		return AppInstance{}, InstanceOperation{}, errdefs.Validation([]errdefs.FieldError{{Field: "/target_version", Code: CodeRequired, Message: "is required: the version to move to"}})
	}
	if in.TargetVersion == inst.Version {
		return AppInstance{}, InstanceOperation{}, errdefs.Validation([]errdefs.FieldError{{Field: "/target_version", Code: CodeSameVersion,
			Message: fmt.Sprintf("the instance already runs %s", inst.Version)}})
	}
	if kind == OpRollback && !ranBefore(inst, in.TargetVersion) {
		return AppInstance{}, InstanceOperation{}, errdefs.Validation([]errdefs.FieldError{{Field: "/target_version", Code: CodeNotAnEarlierVersion,
			Message: fmt.Sprintf("the instance never ran %s; it can roll back to %v", in.TargetVersion, earlierVersions(inst))}})
	}
	var doc LaunchDoc
	if err := json.Unmarshal(inst.Effective, &doc); err != nil {
		return AppInstance{}, InstanceOperation{}, err
	}
	t, err := s.resolve(ctx, s.Store.Read(), p, inst.AppSlug, in.TargetVersion, doc.Request, inst.TargetAllocationID, kind == OpRollback, gpuCheck{on: true, except: inst.ID})
	if err != nil {
		return AppInstance{}, InstanceOperation{}, targetRefusal(err)
	}
	status, event, verb := StatusUpgrading, EventUpgradeRequested, "upgrade"
	if kind == OpRollback {
		status, event, verb = StatusRollingBack, EventRollbackRequested, "roll back"
	}
	op := s.newOperation(ctx, inst, kind, inst.Version, in.TargetVersion, fmt.Sprintf("%s %s from %s to %s", verb, inst.AppSlug, inst.Version, in.TargetVersion))
	// What the move was resolved under is held until it is recorded, as a
	// launch holds it: the target version's status and the entitlement.
	hold := func(ctx context.Context, tx Tx) error {
		if err := holdVersion(ctx, tx, inst.AppSlug, in.TargetVersion, kind == OpRollback); err != nil {
			return targetRefusal(err)
		}
		return targetRefusal(holdEntitlement(ctx, tx, p, t, doc.Request))
	}
	out, err := s.begin(ctx, inst, op, status, event, "app_instance."+string(kind), hold)
	return out, op, err
}

// targetRefusal points the catalog's /version refusals at /target_version.
func targetRefusal(err error) error { return movedField(err, "/version", "/target_version") }

// movedField points the field errors of err at field from to field to: a
// refusal of the launch resolution, answered for a request that names the
// field otherwise.
func movedField(err error, from, to string) error {
	e, ok := errdefs.As(err)
	if !ok {
		return err
	}
	if fields, ok := e.Details["fields"].([]errdefs.FieldError); ok {
		out := make([]errdefs.FieldError, len(fields))
		for i, f := range fields {
			if f.Field == from {
				f.Field = to
			}
			out[i] = f
		}
		return errdefs.Validation(out)
	}
	return err
}

func ranBefore(inst AppInstance, version string) bool {
	for _, h := range history(inst) {
		if h.Version == version && h.Version != inst.Version {
			return true
		}
	}
	return false
}

func earlierVersions(inst AppInstance) []string {
	out := []string{}
	for _, h := range history(inst) {
		if h.Version != inst.Version && !contains(out, h.Version) {
			out = append(out, h.Version)
		}
	}
	return out
}

func history(inst AppInstance) []HistoryEntry {
	var h []HistoryEntry
	_ = json.Unmarshal(inst.History, &h)
	return h
}

// Decommission tears the instance down: the worker removes its workload
// and only marks it decommissioned once the node proves nothing remains.
// Repeating it is harmless: an instance already decommissioning or
// decommissioned answers with the operation that does (or did) it.
func (s *Service) Decommission(ctx context.Context, g *iam.Grants, projectID, id string) (AppInstance, InstanceOperation, error) {
	_, inst, err := s.instance(ctx, g, projectID, id, iam.PermInstanceDelete)
	if err != nil {
		return AppInstance{}, InstanceOperation{}, err
	}
	if decommissionBegun(inst) {
		return s.decommissionRepeated(ctx, inst)
	}
	if busy(inst.Status) {
		return AppInstance{}, InstanceOperation{}, errBusy(inst)
	}
	op := s.newOperation(ctx, inst, OpDecommission, inst.Version, "", fmt.Sprintf("decommission %s %s", inst.AppSlug, inst.Version))
	out, err := s.begin(ctx, inst, op, StatusDecommissioning, EventDecommissionRequested, "app_instance.decommission", nil)
	if e, ok := errdefs.As(err); ok && e.Code == operationInProgressCode {
		// Another request won the race for the instance; when it was a
		// decommission too, this one is its repeat, not a conflict.
		if cur, gerr := s.Store.Read().GetAppInstanceByID(ctx, inst.ID); gerr == nil && decommissionBegun(cur) {
			return s.decommissionRepeated(ctx, cur)
		}
	}
	return out, op, err
}

// decommissionBegun reports whether a decommission already began (or ended).
func decommissionBegun(inst AppInstance) bool {
	return inst.Status == StatusDecommissioning || inst.Status == StatusDecommissioned
}

// decommissionRepeated answers a decommission of an instance already
// decommissioning or decommissioned with the operation that does (or did)
// it. The repeat changes nothing, but the request is still recorded.
func (s *Service) decommissionRepeated(ctx context.Context, inst AppInstance) (AppInstance, InstanceOperation, error) {
	op, err := s.Store.Read().GetInstanceOperation(ctx, inst.ProjectID, inst.CurrentOperationID)
	if err != nil {
		return inst, op, err
	}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		return tx.Audit(storage.AuditEvent{Action: "app_instance.decommission", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: "already_" + string(inst.Status)}, nil, auditState(inst))
	})
	return inst, op, err
}

// begin records a lifecycle request: the operation, the instance's new
// status, its event and audit row — refused with 409 if another request
// won the race for the instance. hold, when set, runs once the instance is
// locked, before anything is written: it keeps what the request was
// resolved under from changing until the recording commits, or refuses.
func (s *Service) begin(ctx context.Context, inst AppInstance, op InstanceOperation, status InstanceStatus, event, action string, hold func(context.Context, Tx) error) (AppInstance, error) {
	before := inst
	inst.Status, inst.CurrentOperationID, inst.UpdatedAt = status, op.ID, s.Now().UTC()
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		// A member operation leaves the status as it was: what it holds is
		// the instance's current operation.
		cur, err := tx.LockAppInstance(ctx, inst.ID)
		if err != nil {
			return err
		}
		if open, err := s.opOpen(ctx, tx, cur); err != nil || open {
			if err == nil {
				err = errBusy(cur)
			}
			return err
		}
		if hold != nil {
			if err := hold(ctx, tx); err != nil {
				return err
			}
		}
		if err := tx.UpdateAppInstance(ctx, inst, before.Status); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				cur, gerr := tx.GetAppInstanceByID(ctx, inst.ID)
				if gerr != nil {
					return gerr
				}
				return errBusy(cur)
			}
			return err
		}
		if err := tx.InsertInstanceOperation(ctx, op); err != nil {
			return err
		}
		if err := s.record(ctx, tx, inst, op, event, nil); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: action, ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID}, auditState(before), auditState(inst))
	})
	if err != nil {
		return AppInstance{}, err
	}
	s.kick()
	return inst, nil
}
