package instances

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/runtime"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Members of a cluster app. A version whose runtime profile declares
// `members` lets an operator add workers (or heads, nodes, controllers) to
// a running instance: each member is its own workload — the version's image,
// told its role and name — on an allocation of the project, on any node.
// Members belong to the instance's deployment: an upgrade, a rollback and a
// recovery redeploy them with it, a decommission removes them on every node
// and verifies each. Each member operation (add, remove, recover) is an
// instance operation that names its members; the instance stays running
// while it runs, and no other operation starts on it meanwhile.
//
// A member fails (member_failed) when its node is lost (node_lost), when its
// node reports its container exited (container_exited), or when its run
// failed; recover redeploys it where it was.

// Member limits.
const (
	// maxMembersPerAdd bounds one add request.
	maxMembersPerAdd = 16
	// defaultMaxMembers bounds an instance's live members when its version
	// declares no max_count.
	defaultMaxMembers = 64
)

// Field error codes of member requests.
const (
	CodeMembersNotSupported = "members_not_supported"
	CodeRoleNotAllowed      = "role_not_allowed"
	CodeTooManyMembers      = "too_many_members"
	CodeGPUsInUse           = "gpus_in_use"
	memberNotFoundCode      = "app_instance_member_not_found"
)

// Reasons only members carry.
const (
	ReasonWorkloadMissing = "workload_missing"
)

// MembersInput is the body of an add: count members of role on an
// allocation (empty: the instance's own).
type MembersInput struct {
	Role         string `json:"role"`
	AllocationID string `json:"allocation_id"`
	Count        int    `json:"count"`
}

func errMemberNotFound(id string) error {
	return errdefs.NotFound(memberNotFoundCode, "app instance member %q does not exist on this instance; list them with GET …/members", id)
}

// memberWorkload names an added member's workload: stable for the member,
// since every (re)deployment of it removes the previous one first.
func memberWorkload(instanceID, name string) string {
	return "gpuaas-" + instanceID + "-" + name
}

// liveAdded lists an instance's added members not yet removed.
func liveAdded(ms []InstanceMember) []InstanceMember {
	var out []InstanceMember
	for _, m := range ms {
		if m.Added && m.Status != MemberRemoved {
			out = append(out, m)
		}
	}
	return out
}

// deployingAdded lists the added members being (re)deployed.
func deployingAdded(ms []InstanceMember) []InstanceMember {
	var out []InstanceMember
	for _, m := range ms {
		if m.Added && m.Status == MemberDeploying {
			out = append(out, m)
		}
	}
	return out
}

func (s *Service) members(ctx context.Context, q Queries, instanceID string) ([]InstanceMember, error) {
	ms, _, err := q.ListInstanceMembers(ctx, instanceID, storage.Page{Limit: storage.MaxPageLimit})
	return ms, err
}

// memberReady refuses a member operation on an instance that is not
// running or has an operation under way.
func (s *Service) memberReady(ctx context.Context, inst AppInstance, verb string, allowFailed bool) error {
	if busy(inst.Status) {
		return errBusy(inst)
	}
	if open, err := s.opOpen(ctx, s.Store.Read(), inst); err != nil || open {
		if err == nil {
			err = errBusy(inst)
		}
		return err
	}
	if inst.Status != StatusRunning && !(allowFailed && inst.Status == StatusFailed) {
		return errdefs.FailedPrecondition("instance_not_running",
			"app instance %s is %s; members can be %s only while it runs", inst.ID, inst.Status, verb)
	}
	return nil
}

// opOpen reports whether the instance's current operation is in progress
// (a member operation leaves the instance's status as it was).
func (s *Service) opOpen(ctx context.Context, q Queries, inst AppInstance) (bool, error) {
	if inst.CurrentOperationID == "" {
		return false, nil
	}
	op, err := q.GetInstanceOperation(ctx, inst.ProjectID, inst.CurrentOperationID)
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	return op.State == OpInProgress, err
}

// AddMembers adds count members of a role to a running instance on an
// allocation of its project; the worker deploys them. Every refusal names
// its field.
func (s *Service) AddMembers(ctx context.Context, g *iam.Grants, projectID, id string, in MembersInput) (AppInstance, InstanceOperation, []InstanceMember, error) {
	p, inst, err := s.instance(ctx, g, projectID, id, iam.PermInstanceUpdate)
	if err != nil {
		return AppInstance{}, InstanceOperation{}, nil, err
	}
	if err := s.memberReady(ctx, inst, "added", false); err != nil {
		return AppInstance{}, InstanceOperation{}, nil, err
	}
	in.Role, in.AllocationID = strings.TrimSpace(in.Role), strings.TrimSpace(in.AllocationID)
	if in.Count == 0 {
		in.Count = 1
	}
	if in.AllocationID == "" {
		in.AllocationID = inst.TargetAllocationID
	}
	spec, err := s.memberSpec(ctx, inst)
	if err != nil {
		return AppInstance{}, InstanceOperation{}, nil, err
	}
	var fe []errdefs.FieldError
	bad := func(field, code, format string, args ...any) {
		fe = append(fe, errdefs.FieldError{Field: field, Code: code, Message: fmt.Sprintf(format, args...)})
	}
	if spec == nil {
		bad("/role", CodeMembersNotSupported, "%s %s declares no members (runtime_profile.members of a launchable_oci profile, or an external_worker_contract.child_operation); it runs as one workload", inst.AppSlug, inst.Version)
		return AppInstance{}, InstanceOperation{}, nil, errdefs.Validation(fe)
	}
	if in.Role == "" {
		bad("/role", CodeRequired, "is required: one of %v", spec.Roles)
	} else if !slices.Contains(spec.Roles, in.Role) {
		bad("/role", CodeRoleNotAllowed, "%s %s allows members of roles %v, not %q", inst.AppSlug, inst.Version, spec.Roles, in.Role)
	}
	if in.Count < 1 || in.Count > maxMembersPerAdd {
		bad("/count", "out_of_range", "must be between 1 and %d", maxMembersPerAdd)
	}
	all, err := s.members(ctx, s.Store.Read(), inst.ID)
	if err != nil {
		return AppInstance{}, InstanceOperation{}, nil, err
	}
	live := liveAdded(all)
	limit := spec.MaxCount
	if limit == 0 {
		limit = defaultMaxMembers
	}
	if len(fe) == 0 && len(live)+in.Count > limit {
		bad("/count", CodeTooManyMembers, "the instance has %d member(s); %s %s allows at most %d", len(live), inst.AppSlug, inst.Version, limit)
	}
	if fe != nil {
		return AppInstance{}, InstanceOperation{}, nil, errdefs.Validation(fe)
	}
	var doc LaunchDoc
	if err := json.Unmarshal(inst.Effective, &doc); err != nil {
		return AppInstance{}, InstanceOperation{}, nil, err
	}
	t, err := s.resolve(ctx, s.Store.Read(), p, inst.AppSlug, inst.Version, doc.Request, in.AllocationID, true, gpuCheck{})
	if err != nil {
		return AppInstance{}, InstanceOperation{}, nil, movedField(err, "/target_allocation_id", "/allocation_id")
	}
	gpus, err := freeGPUs(ctx, s.Store.Read(), t.allocation, t.effective.Resources.GPUCount, in.Count)
	if err != nil {
		return AppInstance{}, InstanceOperation{}, nil, err
	}
	now := s.Now().UTC()
	var added []InstanceMember
	seq := 0
	for _, m := range all {
		if m.Added {
			seq++
		}
	}
	for i := range in.Count {
		seq++
		name := fmt.Sprintf("%s-%d", in.Role, seq)
		added = append(added, InstanceMember{ID: iam.NewID(), InstanceID: inst.ID, AllocationID: t.allocation.ID, NodeID: t.allocation.NodeID,
			Role: in.Role, Status: MemberDeploying, Version: inst.Version, Digest: t.digest, WorkloadName: memberWorkload(inst.ID, name),
			Name: name, Added: true, GPUUUIDs: gpus[i], CreatedAt: now, UpdatedAt: now})
	}
	op := s.newOperation(ctx, inst, OpMemberAdd, inst.Version, inst.Version,
		fmt.Sprintf("add %d %s member(s) to %s on allocation %s (node %s)", in.Count, in.Role, inst.AppSlug, t.allocation.ID, t.allocation.NodeID))
	for _, m := range added {
		op.MemberIDs = append(op.MemberIDs, m.ID)
	}
	out, err := s.beginMembers(ctx, inst, op, added, nil, t.allocation, "app_instance.member_add")
	return out, op, added, err
}

// memberSpec says which members an instance's version lets operators add:
// a launchable_oci version's runtime_profile.members, run by the node
// agents; or, for a version an external worker drives, the child component
// of its contract (external_worker_contract.child_operation), whose
// component key is the members' role and which the worker provisions
// through member operations it acquires like any other. Nil: none.
func (s *Service) memberSpec(ctx context.Context, inst AppInstance) (*manifest.Members, error) {
	v, err := s.Store.Read().GetAppVersion(ctx, inst.AppSlug, inst.Version)
	if err != nil {
		return nil, err
	}
	var mv manifest.Version
	if err := json.Unmarshal(v.Manifest, &mv); err != nil {
		return nil, fmt.Errorf("stored manifest of %s %s: %w", inst.AppSlug, inst.Version, err)
	}
	if workerDriven(inst.RuntimeBackend) {
		c := mv.ExternalWorkerContract
		if c == nil || c.ChildOperation == nil || c.ChildOperation.ComponentKey == "" {
			return nil, nil
		}
		return &manifest.Members{Roles: []string{c.ChildOperation.ComponentKey}}, nil
	}
	if p := mv.RuntimeProfile; p != nil && p.Kind == manifest.ProfileLaunchableOCI {
		return p.Members, nil
	}
	return nil, nil
}

// freeGPUs picks per member the GPUs it gets on an allocation: none of
// those an instance (this one or another) or a member holds there.
func freeGPUs(ctx context.Context, q Queries, a Allocation, per, count int) ([][]string, error) {
	out := make([][]string, count)
	if per == 0 {
		return out, nil
	}
	held, err := gpusHeld(ctx, q, a, "")
	if err != nil {
		return nil, err
	}
	free, ok := pickGPUs(a, held, nil, per*count)
	if !ok {
		return nil, errdefs.Validation([]errdefs.FieldError{{Field: "/count", Code: CodeGPUsInUse,
			Message: fmt.Sprintf("%d member(s) of %d GPU(s) each need %d GPUs; allocation %s has %d of its %d free (app instances and members on it hold the rest)",
				count, per, per*count, a.ID, len(free), len(a.GPUUUIDs))}})
	}
	for i := range count {
		out[i] = free[i*per : (i+1)*per]
	}
	return out, nil
}

// holdMemberGPUs takes the placement lock of the node of allocation a,
// where the new members run, and refuses them if another launch or member
// took one of their GPUs since freeGPUs chose them.
func holdMemberGPUs(ctx context.Context, tx Tx, insert []InstanceMember, a Allocation) error {
	if len(insert) == 0 || a.ID == "" {
		return nil
	}
	if err := tx.LockPlacement(ctx, a.NodeID); err != nil {
		return err
	}
	held, err := gpusHeld(ctx, tx, a, "")
	if err != nil {
		return err
	}
	for _, m := range insert {
		for _, u := range m.GPUUUIDs {
			if held[u] != "" {
				return errdefs.Validation([]errdefs.FieldError{{Field: "/count", Code: CodeGPUsInUse,
					Message: fmt.Sprintf("GPU %s of allocation %s was taken by another launch while this request ran; ask again", u, a.ID)}})
			}
		}
	}
	return nil
}

// RemoveMember removes one added member: its workload is removed and its
// absence verified on its node, and its key expires.
func (s *Service) RemoveMember(ctx context.Context, g *iam.Grants, projectID, id, memberID string) (AppInstance, InstanceOperation, InstanceMember, error) {
	inst, m, err := s.addedMember(ctx, g, projectID, id, memberID)
	if err != nil {
		return AppInstance{}, InstanceOperation{}, m, err
	}
	if err := s.memberReady(ctx, inst, "removed", true); err != nil {
		return AppInstance{}, InstanceOperation{}, m, err
	}
	if m.Status == MemberRemoved {
		return AppInstance{}, InstanceOperation{}, m, errdefs.Conflict("member_already_removed", "member %s (%s) was removed at %s", m.ID, m.Name, m.UpdatedAt.Format("2006-01-02T15:04:05Z"))
	}
	op := s.newOperation(ctx, inst, OpMemberRemove, inst.Version, inst.Version, fmt.Sprintf("remove member %s (%s) from node %s", m.Name, m.ID, m.NodeID))
	op.MemberIDs = []string{m.ID}
	out, err := s.beginMembers(ctx, inst, op, nil, nil, Allocation{}, "app_instance.member_remove")
	return out, op, m, err
}

// RecoverMember redeploys a failed member where it was.
func (s *Service) RecoverMember(ctx context.Context, g *iam.Grants, projectID, id, memberID string) (AppInstance, InstanceOperation, InstanceMember, error) {
	inst, m, err := s.addedMember(ctx, g, projectID, id, memberID)
	if err != nil {
		return AppInstance{}, InstanceOperation{}, m, err
	}
	if err := s.memberReady(ctx, inst, "recovered", false); err != nil {
		return AppInstance{}, InstanceOperation{}, m, err
	}
	if m.Status != MemberFailed {
		return AppInstance{}, InstanceOperation{}, m, errdefs.FailedPrecondition("member_not_failed",
			"member %s (%s) is %s; only a failed member can be recovered", m.ID, m.Name, m.Status)
	}
	op := s.newOperation(ctx, inst, OpMemberRecover, inst.Version, inst.Version, fmt.Sprintf("recover member %s (%s) on node %s", m.Name, m.ID, m.NodeID))
	op.MemberIDs = []string{m.ID}
	m.Status, m.UpdatedAt = MemberDeploying, s.Now().UTC()
	out, err := s.beginMembers(ctx, inst, op, nil, []InstanceMember{m}, Allocation{}, "app_instance.member_recover")
	return out, op, m, err
}

// addedMember resolves an instance the caller may update and one of its
// added members.
func (s *Service) addedMember(ctx context.Context, g *iam.Grants, projectID, id, memberID string) (AppInstance, InstanceMember, error) {
	_, inst, err := s.instance(ctx, g, projectID, id, iam.PermInstanceUpdate)
	if err != nil {
		return AppInstance{}, InstanceMember{}, err
	}
	m, err := s.Store.Read().GetInstanceMember(ctx, inst.ID, memberID)
	if errors.Is(err, storage.ErrNotFound) {
		return AppInstance{}, InstanceMember{}, errMemberNotFound(memberID)
	}
	if err != nil {
		return AppInstance{}, InstanceMember{}, err
	}
	if !m.Added {
		return AppInstance{}, InstanceMember{}, errdefs.FailedPrecondition("member_not_added",
			"member %s is the instance's own %s workload; it comes and goes with the instance (upgrade, rollback, decommission)", m.ID, m.Role)
	}
	return inst, m, nil
}

// beginMembers records a member request: the operation, the new members
// (or the members' changed rows), the instance's current operation and the
// audit row — refused with 409 when another operation won the race.
func (s *Service) beginMembers(ctx context.Context, inst AppInstance, op InstanceOperation, insert, update []InstanceMember, on Allocation, action string) (AppInstance, error) {
	before := inst
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		cur, err := tx.LockAppInstance(ctx, inst.ID)
		if err != nil {
			return err
		}
		if open, err := s.opOpen(ctx, tx, cur); err != nil || open || cur.Status != before.Status {
			if err == nil {
				err = errBusy(cur)
			}
			return err
		}
		if err := holdMemberGPUs(ctx, tx, insert, on); err != nil {
			return err
		}
		if inst, err = s.startMemberOp(ctx, tx, inst, op, insert, update); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: action, ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: op.Description}, auditState(before), auditState(inst))
	})
	if err != nil {
		return AppInstance{}, err
	}
	s.kick()
	return inst, nil
}

// startMemberOp records a member operation in tx: the operation, the new
// members and the members' changed rows, and the instance holding it as
// its current operation (its status stays as it is). It returns the
// instance as written; the caller audits and kicks the driver.
func (s *Service) startMemberOp(ctx context.Context, tx Tx, inst AppInstance, op InstanceOperation, insert, update []InstanceMember) (AppInstance, error) {
	prev := inst.Status
	inst.CurrentOperationID, inst.UpdatedAt = op.ID, s.Now().UTC()
	if err := tx.UpdateAppInstance(ctx, inst, prev); err != nil {
		return inst, err
	}
	if err := tx.InsertInstanceOperation(ctx, op); err != nil {
		return inst, err
	}
	for _, m := range insert {
		if err := tx.InsertInstanceMember(ctx, m); err != nil {
			return inst, err
		}
	}
	for _, m := range update {
		if err := tx.UpdateInstanceMember(ctx, m); err != nil {
			return inst, err
		}
	}
	return inst, nil
}

// placed is a node task with the node it goes to.
type placed struct {
	node string
	task runtime.Task
}

func on(node string, tasks ...runtime.Task) []placed {
	out := make([]placed, len(tasks))
	for i, t := range tasks {
		out[i] = placed{node, t}
	}
	return out
}

// opMembers reads the members an operation names.
func (s *Service) opMembers(ctx context.Context, q Queries, inst AppInstance, op InstanceOperation) ([]InstanceMember, error) {
	out := make([]InstanceMember, 0, len(op.MemberIDs))
	for _, id := range op.MemberIDs {
		m, err := q.GetInstanceMember(ctx, inst.ID, id)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// stepMembers advances a member operation by at most one phase.
func (s *Service) stepMembers(ctx context.Context, inst AppInstance, op InstanceOperation) (bool, error) {
	ms, err := s.opMembers(ctx, s.Store.Read(), inst, op)
	if err != nil {
		return false, err
	}
	if op.Phase != phaseStart {
		if _, done, err := s.outcomes(ctx, op.TaskID); err != nil || !done {
			return false, err
		}
	}
	switch {
	case op.Phase == phaseStart && op.Kind == OpMemberAdd:
		return true, s.queueMembers(ctx, inst, op, phaseRun, ms, inst.Version)
	case op.Phase == phaseStart: // recover and remove: the old workload goes first
		next := OperationPhase(phaseRemoveOld)
		if op.Kind == OpMemberRemove {
			next = phaseTeardown
		}
		return true, s.queue(ctx, inst, op, next, "", s.memberTeardown(ms), "app_instance.member_teardown")
	case op.Phase == phaseRemoveOld:
		return true, s.queueMembers(ctx, inst, op, phaseRun, ms, inst.Version)
	case op.Phase == phaseRun:
		return true, s.finishMembers(ctx, inst, op, ms)
	case op.Phase == phaseTeardown:
		var tasks []placed
		for node, names := range byNode(ms) {
			tasks = append(tasks, placed{node, runtime.VerifyNamed(inst.ID, names)})
		}
		return true, s.queue(ctx, inst, op, phaseVerify, "", tasks, "app_instance.member_teardown_verify")
	case op.Phase == phaseVerify:
		var remaining []string
		for _, id := range strings.Split(op.TaskID, ",") {
			o, err := s.Tasks.Outcome(ctx, id)
			if err != nil {
				return false, err
			}
			var v nodeapi.VerifyOutput
			_ = json.Unmarshal(o.Result.Output, &v)
			if o.Result.State != nodeapi.ResultSucceeded {
				remaining = append(remaining, "verify failed: "+reasonOf(o.Result))
			}
			remaining = append(remaining, v.Remaining...)
		}
		if len(remaining) == 0 {
			return true, s.removedMembers(ctx, inst, op, ms)
		}
		op.Description = "member teardown incomplete, retrying: " + strings.Join(remaining, ", ")
		return true, s.queue(ctx, inst, op, phaseTeardown, "", s.memberTeardown(ms), "app_instance.member_teardown")
	}
	return false, fmt.Errorf("operation %s: unknown phase %q", op.ID, op.Phase)
}

// byNode groups members' workload names by node.
func byNode(ms []InstanceMember) map[string][]string {
	out := map[string][]string{}
	for _, m := range ms {
		out[m.NodeID] = append(out[m.NodeID], m.WorkloadName)
	}
	return out
}

// memberTeardown lists the removal of each member's workload on its node.
func (s *Service) memberTeardown(ms []InstanceMember) []placed {
	var out []placed
	for _, m := range ms {
		out = append(out, placed{m.NodeID, runtime.Teardown(manifest.ProfileLaunchableOCI, m.InstanceID, m.WorkloadName)})
	}
	return out
}

// queueMembers deploys members at version (one run task each, on its node)
// and moves the operation to phase.
func (s *Service) queueMembers(ctx context.Context, inst AppInstance, op InstanceOperation, phase OperationPhase, ms []InstanceMember, version string) error {
	prevPhase := op.Phase
	now := s.Now().UTC()
	renders, err := s.renderMembers(ctx, inst, ms, version)
	if err != nil {
		return s.failMembers(ctx, inst, op, ms, refusalReason(err), err.Error())
	}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		ids, err := s.deployMembers(ctx, tx, inst, renders, now)
		if err != nil {
			return err
		}
		op.Phase, op.TaskID, op.UpdatedAt = phase, strings.Join(ids, ","), now
		if err := tx.UpdateInstanceOperation(ctx, op, prevPhase); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance.member_deploy", ResourceType: "app_instance", ResourceID: inst.ID, OrgID: inst.OrgID,
			ProjectID: inst.ProjectID, Reason: fmt.Sprintf("deploy %d member(s) of %s %s", len(ms), inst.AppSlug, version)}, nil, auditState(inst))
	})
	if e, ok := errdefs.As(err); ok && e.Code == ReasonRenderFailed {
		// As in deployStep: the same members render the same way on every
		// pass, so the operation ends instead of staying in progress.
		return s.failMembers(ctx, inst, op, ms, ReasonRenderFailed, e.Message)
	}
	return err
}

// memberRender is a member's deployment, rendered but for its key.
type memberRender struct {
	m InstanceMember
	d runtime.Deployment
}

// renderMembers resolves each member's allocation and pulls for version.
// Nothing is written: a launch that no longer resolves is the caller's
// failure to record.
func (s *Service) renderMembers(ctx context.Context, inst AppInstance, ms []InstanceMember, version string) ([]memberRender, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	q := s.Store.Read()
	p, err := q.GetProject(ctx, inst.ProjectID)
	if err != nil {
		return nil, err
	}
	var doc LaunchDoc
	if err := json.Unmarshal(inst.Effective, &doc); err != nil {
		return nil, err
	}
	var out []memberRender
	for _, m := range ms {
		t, err := s.resolve(ctx, q, p, inst.AppSlug, version, doc.Request, m.AllocationID, true, gpuCheck{})
		if err != nil {
			return nil, err
		}
		a := t.artifacts[runtime.LaunchImage]
		pull := nodeapi.ImagePull{Repository: s.imageRepository(t, runtime.LaunchImage, a), Digest: a.Digest}
		if s.Pulls != nil {
			if pull, err = s.Pulls.NodePull(ctx, m.NodeID, a); err != nil {
				return nil, errdefs.FailedPrecondition(ReasonImagePullFailed, "no pull credentials for node %s: %v", m.NodeID, err)
			}
		}
		res := workloadResources(t.effective.Resources, t.allocation)
		res.HostPort = 0 // a member publishes on a port its node picks
		m.Version, m.Digest = version, a.Digest
		out = append(out, memberRender{m: m, d: runtime.Deployment{InstanceID: inst.ID, ProjectID: inst.ProjectID, OrgID: inst.OrgID,
			NodeID: m.NodeID, AppSlug: inst.AppSlug, Version: version, Name: m.WorkloadName, Profile: t.manifest.RuntimeProfile,
			Images: map[string]nodeapi.ImagePull{runtime.LaunchImage: pull}, Resources: res, Parameters: t.effective.Parameters,
			GPUUUIDs: m.GPUUUIDs, ReadinessTimeoutSeconds: int(s.ReadinessTimeout.Seconds()),
			Member: &runtime.Member{ID: m.ID, Name: m.Name, Role: m.Role}}})
	}
	return out, nil
}

// deployMembers gives each rendered member a key of its own, queues its run
// task and records it deploying, in tx; it returns the task ids.
func (s *Service) deployMembers(ctx context.Context, tx Tx, inst AppInstance, rs []memberRender, now time.Time) ([]string, error) {
	var ids []string
	for _, r := range rs {
		m := r.m
		if s.SA != nil && inst.ServiceAccountID != "" {
			if err := s.SA.ExpireWorkloadKey(ctx, tx, inst.ServiceAccountID, m.KeyID); err != nil {
				return nil, err
			}
			k, err := s.SA.KeyWorkload(ctx, tx, inst.ProjectID, inst.ServiceAccountID)
			if err != nil {
				return nil, err
			}
			m.KeyID = k.Key.ID
			r.d.Identity = &runtime.Identity{ServiceAccountID: inst.ServiceAccountID, ProjectID: inst.ProjectID, KeyID: k.Key.ID,
				Algorithm: k.Key.Algorithm, PrivateKeyPEM: k.PrivateKeyPEM, TokenURL: k.TokenURL, APIBaseURL: s.APIBaseURL()}
		}
		task, err := runtime.Render(r.d)
		if err != nil {
			return nil, errdefs.FailedPrecondition(ReasonRenderFailed, "render member %s of %s %s: %v", m.Name, inst.AppSlug, r.d.Version, err)
		}
		id, err := s.Tasks.Enqueue(ctx, tx, m.NodeID, task.Kind, inst.ID, inst.ProjectID, task.Payload)
		if err != nil {
			return nil, err
		}
		m.Status, m.TaskID, m.ContainerIDs, m.ReasonCode, m.ReasonMessage, m.UpdatedAt = MemberDeploying, id, nil, "", "", now
		if err := tx.UpdateInstanceMember(ctx, m); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// settleMembers reads each member's run task and records it running or
// failed with its event, in tx; it returns the first failure's reason.
func (s *Service) settleMembers(ctx context.Context, tx Tx, inst AppInstance, op InstanceOperation, ms []InstanceMember, ok string, now time.Time) (string, string, error) {
	var reason, message string
	for _, m := range ms {
		o, err := s.Tasks.Outcome(ctx, m.TaskID)
		if err != nil {
			return "", "", err
		}
		res := o.Result
		var out nodeapi.RunOutput
		_ = json.Unmarshal(res.Output, &out)
		if res.State == nodeapi.ResultSucceeded && !slices.Equal(slices.Compact(slices.Sorted(slices.Values(out.ImageDigests))), []string{m.Digest}) {
			res = nodeapi.TaskResult{State: nodeapi.ResultFailed, ReasonCode: nodeapi.ReasonDigestMismatch,
				Message: fmt.Sprintf("the node runs %v; the member pins %s", out.ImageDigests, m.Digest)}
		}
		event := ok
		if res.State == nodeapi.ResultSucceeded {
			ids, _ := json.Marshal(out.ContainerIDs)
			m.Status, m.ContainerIDs, m.ReasonCode, m.ReasonMessage = MemberRunning, ids, "", ""
		} else {
			m.Status, m.ReasonCode, m.ReasonMessage, event = MemberFailed, reasonOf(res), res.Message, EventMemberFailed
			if reason == "" {
				reason, message = m.ReasonCode, fmt.Sprintf("member %s: %s", m.Name, res.Message)
			}
		}
		m.UpdatedAt = now
		if err := tx.UpdateInstanceMember(ctx, m); err != nil {
			return "", "", err
		}
		if event != "" {
			if err := s.recordMember(ctx, tx, inst, op, event, m); err != nil {
				return "", "", err
			}
		}
	}
	return reason, message, nil
}

// finishMembers ends an add or recover once every member's run ended.
func (s *Service) finishMembers(ctx context.Context, inst AppInstance, op InstanceOperation, ms []InstanceMember) error {
	prevPhase := op.Phase
	now := s.Now().UTC()
	event := EventMemberAdded
	if op.Kind == OpMemberRecover {
		event = EventMemberRecovered
	}
	return s.Store.Mutate(ctx, func(tx Tx) error {
		reason, message, err := s.settleMembers(ctx, tx, inst, op, ms, event, now)
		if err != nil {
			return err
		}
		op.State, op.Phase, op.TaskID, op.UpdatedAt, op.CompletedAt = OpSucceeded, phaseDone, "", now, now
		op.Description = fmt.Sprintf("%s: %d member(s) running", op.Kind, len(ms))
		if reason != "" {
			op.State, op.ReasonCode, op.Description = OpFailed, reason, fmt.Sprintf("%s failed: %s", op.Kind, message)
		}
		if err := tx.UpdateInstanceOperation(ctx, op, prevPhase); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance." + string(op.Kind) + "ed", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: op.Description}, nil, auditState(inst))
	})
}

// failMembers ends a member operation that could not deploy: its members
// failed with reason.
func (s *Service) failMembers(ctx context.Context, inst AppInstance, op InstanceOperation, ms []InstanceMember, reason, message string) error {
	prevPhase := op.Phase
	now := s.Now().UTC()
	return s.Store.Mutate(ctx, func(tx Tx) error {
		if err := s.membersFailed(ctx, tx, inst, op, ms, reason, message, now); err != nil {
			return err
		}
		op.State, op.Phase, op.ReasonCode, op.TaskID, op.UpdatedAt, op.CompletedAt = OpFailed, phaseDone, reason, "", now, now
		op.Description = fmt.Sprintf("%s failed: %s: %s", op.Kind, reason, message)
		if err := tx.UpdateInstanceOperation(ctx, op, prevPhase); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance.member_failed", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: op.Description}, nil, auditState(inst))
	})
}

// removedMembers records a verified member removal: the members removed,
// their keys expired, the event.
func (s *Service) removedMembers(ctx context.Context, inst AppInstance, op InstanceOperation, ms []InstanceMember) error {
	prevPhase := op.Phase
	now := s.Now().UTC()
	return s.Store.Mutate(ctx, func(tx Tx) error {
		// A releasing allocation may have waited for these members.
		if err := s.membersGone(ctx, tx, inst, op, ms, now); err != nil {
			return err
		}
		op.State, op.Phase, op.TaskID, op.UpdatedAt, op.CompletedAt = OpSucceeded, phaseDone, "", now, now
		op.Description = fmt.Sprintf("removed %d member(s): teardown verified on their nodes", len(ms))
		if err := tx.UpdateInstanceOperation(ctx, op, prevPhase); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance.member_removed", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: op.Description}, nil, auditState(inst))
	})
}

// membersFailed marks members failed with a reason, each with its event.
func (s *Service) membersFailed(ctx context.Context, tx Tx, inst AppInstance, op InstanceOperation, ms []InstanceMember, reason, message string, now time.Time) error {
	for _, m := range ms {
		m.Status, m.ReasonCode, m.ReasonMessage, m.UpdatedAt = MemberFailed, reason, message, now
		if err := tx.UpdateInstanceMember(ctx, m); err != nil {
			return err
		}
		if err := s.recordMember(ctx, tx, inst, op, EventMemberFailed, m); err != nil {
			return err
		}
	}
	return nil
}

// membersGone records members a worker reports gone: removed, their keys
// expired, each with its event; an allocation being released that waited
// for them is torn down once nothing else is on it.
func (s *Service) membersGone(ctx context.Context, tx Tx, inst AppInstance, op InstanceOperation, ms []InstanceMember, now time.Time) error {
	for _, m := range ms {
		if s.SA != nil && m.KeyID != "" {
			if err := s.SA.ExpireWorkloadKey(ctx, tx, inst.ServiceAccountID, m.KeyID); err != nil {
				return err
			}
		}
		m.Status, m.ContainerIDs, m.ReasonCode, m.ReasonMessage, m.UpdatedAt = MemberRemoved, nil, "", "", now
		if err := tx.UpdateInstanceMember(ctx, m); err != nil {
			return err
		}
		if err := s.recordMember(ctx, tx, inst, op, EventMemberRemoved, m); err != nil {
			return err
		}
	}
	for _, a := range memberAllocations(ms) {
		if a == inst.TargetAllocationID {
			continue // the instance's own; its decommission tears it down
		}
		if err := s.tornDown(ctx, tx, a); err != nil {
			return err
		}
	}
	return nil
}

// MemberData is what a member event says of its member.
type MemberData struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Role         string `json:"role"`
	Status       string `json:"status"`
	NodeID       string `json:"node_id"`
	AllocationID string `json:"allocation_id"`
	WorkloadName string `json:"workload_name"`
}

// recordMember appends the timeline row and emits the event of a member's
// transition.
func (s *Service) recordMember(ctx context.Context, tx Tx, inst AppInstance, op InstanceOperation, event string, m InstanceMember) error {
	return s.record(ctx, tx, inst, op, event, &extra{reasonCode: m.ReasonCode, reason: m.ReasonMessage,
		member: &MemberData{ID: m.ID, Name: m.Name, Role: m.Role, Status: string(m.Status), NodeID: m.NodeID, AllocationID: m.AllocationID, WorkloadName: m.WorkloadName}})
}

// memberAllocations lists the allocations members run on, once each.
func memberAllocations(ms []InstanceMember) []string {
	var out []string
	for _, m := range ms {
		if !slices.Contains(out, m.AllocationID) {
			out = append(out, m.AllocationID)
		}
	}
	return out
}

// releaseMembers starts removing the added members on an allocation being
// released, in the release's transaction: one member_remove operation per
// instance (whose own allocation is elsewhere), when the instance has no
// operation under way. Members of a busy instance stay, and the allocation
// releasing, holding its GPUs, until they are gone: releasing it again once
// the operation ended starts their removal (or an operator removes them).
func (s *Service) releaseMembers(ctx context.Context, tx Tx, allocationID string) error {
	ms, err := tx.AddedMembersOn(ctx, allocationID, "")
	if err != nil {
		return err
	}
	byInstance := map[string][]InstanceMember{}
	var order []string
	for _, m := range ms {
		if _, ok := byInstance[m.InstanceID]; !ok {
			order = append(order, m.InstanceID)
		}
		byInstance[m.InstanceID] = append(byInstance[m.InstanceID], m)
	}
	for _, id := range order {
		inst, err := tx.LockAppInstance(ctx, id)
		if err != nil {
			return err
		}
		if inst.TargetAllocationID == allocationID || inst.Status == StatusDecommissioning || inst.Status == StatusDecommissioned {
			continue // the instance's own decommission removes them
		}
		if open, err := s.opOpen(ctx, tx, inst); err != nil || open {
			if err != nil {
				return err
			}
			s.Logger.WarnContext(ctx, "allocation released under members of a busy instance; release it again once the operation ends (or remove the members)",
				"allocation_id", allocationID, "app_instance_id", id, "operation_id", inst.CurrentOperationID)
			continue
		}
		op := s.newOperation(ctx, inst, OpMemberRemove, inst.Version, inst.Version, fmt.Sprintf("remove %d member(s): allocation %s is being released", len(byInstance[id]), allocationID))
		op.ReasonCode = ReasonAllocationReleased
		for _, m := range byInstance[id] {
			op.MemberIDs = append(op.MemberIDs, m.ID)
		}
		if _, err := s.startMemberOp(ctx, tx, inst, op, nil, nil); err != nil {
			return err
		}
	}
	tx.AfterCommit(s.kick)
	return nil
}
