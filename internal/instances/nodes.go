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
	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// What happens to instances when their node or allocation changes. The
// nodes domain calls these inside its own transaction (tx), so the node's
// state change and its consequences for instances commit together.
//
//   - Node down: every instance on it that is deploying, running, upgrading
//     or rolling back becomes failed with reason node_lost (its in-progress
//     operation fails too). An instance decommissioning stays
//     decommissioning: its teardown tasks wait in the node's queue and the
//     instance is only decommissioned once the returned node verifies it.
//   - Node back: every instance failed with node_lost is reconciled with
//     what the agent reports running. If its current workload still runs
//     (the agent died, the container did not), it is running again at once.
//     Otherwise a new operation removes whatever of it remains and
//     redeploys its current version: deploying → running (or failed with
//     the deploy's reason).
//   - Allocation released (or lost): every live instance on it is
//     decommissioned (reason allocation_released).

// failNode fails the instances of a node that stopped heartbeating.
func (s *Service) failNode(ctx context.Context, tx Tx, nodeID string) error {
	if err := s.failNodeMembers(ctx, tx, nodeID); err != nil {
		return err
	}
	list, err := tx.LiveInstancesOn(ctx, "", nodeID)
	if err != nil {
		return err
	}
	now := s.Now().UTC()
	for _, inst := range list {
		switch inst.Status {
		case StatusDeploying, StatusRunning, StatusUpgrading, StatusRollingBack:
		default:
			continue
		}
		prev := inst.Status
		if inst.CurrentOperationID != "" {
			op, err := tx.GetInstanceOperation(ctx, inst.ProjectID, inst.CurrentOperationID)
			if err != nil {
				return err
			}
			if op.State == OpInProgress {
				if _, err := abortOp(ctx, tx, op, ReasonNodeLost, fmt.Sprintf("%s failed: node %s stopped answering", op.Kind, nodeID), now); err != nil {
					return err
				}
			}
		}
		inst.Status, inst.ReasonCode, inst.UpdatedAt = StatusFailed, ReasonNodeLost, now
		inst.ReasonMessage = fmt.Sprintf("node %s missed its heartbeats; the workload's state is unknown", nodeID)
		if err := tx.UpdateAppInstance(ctx, inst, prev); err != nil {
			return err
		}
		// Its members on the node are failed with it; a recovery redeploys
		// them, or finds them running again.
		if err := tx.SetInstanceMembersStatus(ctx, inst.ID, workloadName(inst.ID, inst.DeploySeq), MemberFailed, nil, now); err != nil {
			return err
		}
		op := InstanceOperation{ID: inst.CurrentOperationID}
		if err := s.record(ctx, tx, inst, op, EventFailed, &extra{reasonCode: ReasonNodeLost, reason: inst.ReasonMessage}); err != nil {
			return err
		}
		if err := tx.Audit(storage.AuditEvent{Action: "app_instance.failed", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: ReasonNodeLost}, nil, auditState(inst)); err != nil {
			return err
		}
	}
	return nil
}

// recoverNode recovers the instances a node's loss failed.
func (s *Service) recoverNode(ctx context.Context, tx Tx, nodeID string, workloads []nodeapi.Workload) error {
	if err := s.recoverNodeMembers(ctx, tx, nodeID, workloads); err != nil {
		return err
	}
	list, err := tx.LiveInstancesOn(ctx, "", nodeID)
	if err != nil {
		return err
	}
	for _, inst := range list {
		if inst.Status != StatusFailed || inst.ReasonCode != ReasonNodeLost {
			continue
		}
		if survived(inst, workloads) {
			if err := s.reconcileRunning(ctx, tx, inst, nodeID); err != nil {
				return err
			}
			continue
		}
		rctx := correlation.With(ctx, correlation.New())
		op := s.newOperation(rctx, inst, OpCreate, inst.Version, inst.Version, fmt.Sprintf("recover %s %s after node %s returned", inst.AppSlug, inst.Version, nodeID))
		prev := inst.Status
		inst.Status, inst.CurrentOperationID, inst.UpdatedAt = StatusDeploying, op.ID, s.Now().UTC()
		if err := tx.InsertInstanceOperation(ctx, op); err != nil {
			return err
		}
		if err := tx.UpdateAppInstance(ctx, inst, prev); err != nil {
			return err
		}
		if err := s.record(rctx, tx, inst, op, EventDeploying, &extra{reason: op.Description}); err != nil {
			return err
		}
		if err := tx.Audit(storage.AuditEvent{Action: "app_instance.recover", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: op.Description}, nil, auditState(inst)); err != nil {
			return err
		}
	}
	tx.AfterCommit(s.kick)
	return nil
}

// AllocationReleased decommissions every live instance on an allocation
// that is being released, in the release's transaction (which it joins).
func (s *Service) AllocationReleased(ctx context.Context, stx storage.Tx, allocationID string) error {
	tx := s.Store.Join(stx)
	list, err := tx.LiveInstancesOn(ctx, allocationID, "")
	if err != nil {
		return err
	}
	now := s.Now().UTC()
	for _, inst := range list {
		if inst.Status == StatusDecommissioning {
			continue
		}
		if inst.CurrentOperationID != "" {
			if op, err := tx.GetInstanceOperation(ctx, inst.ProjectID, inst.CurrentOperationID); err == nil && op.State == OpInProgress {
				if _, err := abortOp(ctx, tx, op, ReasonAllocationReleased, fmt.Sprintf("%s cancelled: allocation %s is being released", op.Kind, allocationID), now); err != nil {
					return err
				}
			}
		}
		op := s.newOperation(ctx, inst, OpDecommission, inst.Version, "", fmt.Sprintf("decommission %s: allocation %s released", inst.AppSlug, allocationID))
		op.ReasonCode = ReasonAllocationReleased
		prev := inst.Status
		inst.Status, inst.ReasonCode, inst.CurrentOperationID, inst.UpdatedAt = StatusDecommissioning, ReasonAllocationReleased, op.ID, now
		if err := tx.InsertInstanceOperation(ctx, op); err != nil {
			return err
		}
		if err := tx.UpdateAppInstance(ctx, inst, prev); err != nil {
			return err
		}
		// The allocation's release is the audited mutation (one audit row
		// per request); each instance's timeline records its decommission.
		if err := s.record(ctx, tx, inst, op, EventDecommissionRequested, &extra{reasonCode: ReasonAllocationReleased}); err != nil {
			return err
		}
	}
	tx.AfterCommit(s.kick)
	return nil
}

// abortOp ends an in-progress operation that cannot go on (its node was
// lost, its allocation released, its deadline passed) with reason and
// description, in tx, written only while it is still at the phase it was
// read at; storage.ErrNotFound when it moved on meanwhile.
func abortOp(ctx context.Context, tx Tx, op InstanceOperation, reason, description string, now time.Time) (InstanceOperation, error) {
	phase := op.Phase
	op.State, op.Phase, op.ReasonCode, op.TaskID, op.UpdatedAt, op.CompletedAt = OpFailed, phaseDone, reason, "", now, now
	op.Description = description
	return op, tx.UpdateInstanceOperation(ctx, op, phase)
}

// survived reports whether the instance's current workload is reported
// running by its node.
func survived(inst AppInstance, workloads []nodeapi.Workload) bool {
	return runningWorkload(workloadName(inst.ID, inst.DeploySeq), workloads)
}

// reconcileRunning marks an instance whose workload outlived its node's
// silence running again.
func (s *Service) reconcileRunning(ctx context.Context, tx Tx, inst AppInstance, nodeID string) error {
	prev := inst.Status
	inst.Status, inst.ReasonCode, inst.ReasonMessage, inst.UpdatedAt = StatusRunning, "", "", s.Now().UTC()
	if err := tx.UpdateAppInstance(ctx, inst, prev); err != nil {
		return err
	}
	if err := tx.SetInstanceMembersStatus(ctx, inst.ID, workloadName(inst.ID, inst.DeploySeq), MemberRunning, nil, inst.UpdatedAt); err != nil {
		return err
	}
	reason := fmt.Sprintf("node %s is back and reports the workload still running", nodeID)
	if err := s.record(ctx, tx, inst, InstanceOperation{ID: inst.CurrentOperationID}, EventRunning, &extra{reason: reason}); err != nil {
		return err
	}
	return tx.Audit(storage.AuditEvent{Action: "app_instance.reconcile", ResourceType: "app_instance", ResourceID: inst.ID,
		OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: reason}, nil, auditState(inst))
}

// failNodeMembers fails the added members on a lost node (node_lost),
// whatever node their instance runs on, and fails a member operation that
// waits on one of them.
func (s *Service) failNodeMembers(ctx context.Context, tx Tx, nodeID string) error {
	ms, err := s.agentMembersOn(ctx, tx, nodeID)
	if err != nil {
		return err
	}
	now := s.Now().UTC()
	for _, m := range ms {
		if m.Status == MemberFailed {
			continue
		}
		inst, err := tx.GetAppInstanceByID(ctx, m.InstanceID)
		if err != nil {
			return err
		}
		op := InstanceOperation{ID: inst.CurrentOperationID}
		if inst.CurrentOperationID != "" {
			cur, err := tx.GetInstanceOperation(ctx, inst.ProjectID, inst.CurrentOperationID)
			if err != nil {
				return err
			}
			if cur.State == OpInProgress && memberOp(cur.Kind) && slices.Contains(cur.MemberIDs, m.ID) {
				if cur, err = abortOp(ctx, tx, cur, ReasonNodeLost, fmt.Sprintf("%s failed: node %s stopped answering", cur.Kind, nodeID), now); err != nil {
					return err
				}
			}
			op = cur
		}
		m.Status, m.ReasonCode, m.UpdatedAt = MemberFailed, ReasonNodeLost, now
		m.ReasonMessage = fmt.Sprintf("node %s missed its heartbeats; the member's state is unknown", nodeID)
		if err := tx.UpdateInstanceMember(ctx, m); err != nil {
			return err
		}
		if err := s.recordMember(ctx, tx, inst, op, EventMemberFailed, m); err != nil {
			return err
		}
		if err := tx.Audit(storage.AuditEvent{Action: "app_instance.member_failed", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: ReasonNodeLost + ": member " + m.Name}, nil, auditState(inst)); err != nil {
			return err
		}
	}
	return nil
}

// recoverNodeMembers reconciles the added members a node's loss failed:
// one whose workload still runs is running again; the others of a running
// instance are redeployed by a member_recover operation (one per instance,
// when no other operation is under way; else recover them by hand).
func (s *Service) recoverNodeMembers(ctx context.Context, tx Tx, nodeID string, workloads []nodeapi.Workload) error {
	ms, err := s.agentMembersOn(ctx, tx, nodeID)
	if err != nil {
		return err
	}
	now := s.Now().UTC()
	redeploy := map[string][]InstanceMember{}
	var order []string
	for _, m := range ms {
		if m.Status != MemberFailed || m.ReasonCode != ReasonNodeLost {
			continue
		}
		inst, err := tx.GetAppInstanceByID(ctx, m.InstanceID)
		if err != nil {
			return err
		}
		if runningWorkload(m.WorkloadName, workloads) {
			m.Status, m.ReasonCode, m.ReasonMessage, m.UpdatedAt = MemberRunning, "", fmt.Sprintf("node %s is back and reports the member still running", nodeID), now
			if err := tx.UpdateInstanceMember(ctx, m); err != nil {
				return err
			}
			if err := s.recordMember(ctx, tx, inst, InstanceOperation{ID: inst.CurrentOperationID}, EventMemberRecovered, m); err != nil {
				return err
			}
			if err := tx.Audit(storage.AuditEvent{Action: "app_instance.member_reconcile", ResourceType: "app_instance", ResourceID: inst.ID,
				OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: m.ReasonMessage}, nil, auditState(inst)); err != nil {
				return err
			}
			continue
		}
		if _, ok := redeploy[inst.ID]; !ok {
			order = append(order, inst.ID)
		}
		redeploy[inst.ID] = append(redeploy[inst.ID], m)
	}
	for _, id := range order {
		inst, err := tx.LockAppInstance(ctx, id)
		if err != nil {
			return err
		}
		if open, err := s.opOpen(ctx, tx, inst); err != nil || open || inst.Status != StatusRunning {
			if err != nil {
				return err
			}
			continue
		}
		rctx := correlation.With(ctx, correlation.New())
		op := s.newOperation(rctx, inst, OpMemberRecover, inst.Version, inst.Version, fmt.Sprintf("recover %d member(s) after node %s returned", len(redeploy[id]), nodeID))
		var deploying []InstanceMember
		for _, m := range redeploy[id] {
			op.MemberIDs = append(op.MemberIDs, m.ID)
			m.Status, m.UpdatedAt = MemberDeploying, now
			deploying = append(deploying, m)
		}
		if inst, err = s.startMemberOp(ctx, tx, inst, op, nil, deploying); err != nil {
			return err
		}
		if err := tx.Audit(storage.AuditEvent{Action: "app_instance.member_recover", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: op.Description}, nil, auditState(inst)); err != nil {
			return err
		}
	}
	return nil
}

// agentMembersOn lists the added members on a node that its agent runs: a
// worker-driven instance's members are its external worker's to run and
// watch, so a node's loss or its workload report says nothing of them.
func (s *Service) agentMembersOn(ctx context.Context, q Queries, nodeID string) ([]InstanceMember, error) {
	ms, err := q.AddedMembersOn(ctx, "", nodeID)
	if err != nil {
		return nil, err
	}
	return s.agentMembers(ctx, q, ms)
}

// agentMembers keeps those of ms whose instance is not worker-driven; it
// reuses ms.
func (s *Service) agentMembers(ctx context.Context, q Queries, ms []InstanceMember) ([]InstanceMember, error) {
	byWorker := map[string]bool{}
	out := ms[:0]
	for _, m := range ms {
		w, ok := byWorker[m.InstanceID]
		if !ok {
			inst, err := q.GetAppInstanceByID(ctx, m.InstanceID)
			if err != nil {
				return nil, err
			}
			w = workerDriven(inst.RuntimeBackend)
			byWorker[m.InstanceID] = w
		}
		if !w {
			out = append(out, m)
		}
	}
	return out, nil
}

// runningWorkload reports whether the node reports the named workload
// running.
func runningWorkload(name string, workloads []nodeapi.Workload) bool {
	for _, w := range workloads {
		if w.State == "running" && (strings.TrimPrefix(w.Name, "/") == name || w.ComposeProject == name) {
			return true
		}
	}
	return false
}

// memberGrace is how long a running member's workload may be absent from
// its node's report before it counts as gone: a report taken just before
// the container started can arrive after the member was marked running.
const memberGrace = 30 * time.Second

// memberCheckEvery is how often each replica compares every running added
// member with its node's stored report (checkMembers): the backstop for
// what the change-driven WorkloadsReported cannot see.
const memberCheckEvery = 10 * time.Second

// WorkloadsReported fails the running added members of a node whose
// workload the node reports exited (container_exited) or no longer has
// (workload_missing). The nodes domain calls it after it stored a changed
// workload list, so a change is acted on at once; each failure is its own
// mutation with its event and audit row. What it cannot see — a replica
// that stored the list and died before calling it, a call that failed, a
// report that arrived before the member was marked running, a workload
// still within memberGrace — checkMembers catches from the stored report.
func (s *Service) WorkloadsReported(ctx context.Context, nodeID string, workloads []nodeapi.Workload) error {
	ms, err := s.runningAgentMembersOn(ctx, s.Store.Read(), nodeID)
	if err != nil {
		return err
	}
	now := s.Now().UTC()
	return s.failGoneMembers(ctx, nodeID, ms, workloads, now, now)
}

// checkMembers compares each running added member that a node agent runs
// with what its node (ready or draining) last reported, and fails the
// members whose workload is gone — whether or not the report changed since
// the member was checked. It costs one read (RunningMemberReports: the
// running added members joined with their nodes' reports), however many
// nodes there are: most have no added member, and a read per node every
// memberCheckEvery on every replica grew with the fleet for nothing.
// Every replica runs it (the driver's worker, every memberCheckEvery):
// the failure is a conditional mutation, so two replicas fail a member
// once.
func (s *Service) checkMembers(ctx context.Context) error {
	rs, err := s.Store.Read().RunningMemberReports(ctx)
	if err != nil {
		return err
	}
	now := s.Now().UTC()
	var errs []error
	// rs comes ordered by node: each node's members are failed together,
	// against its report decoded once.
	for len(rs) > 0 {
		r := rs[0]
		n := 1
		for n < len(rs) && rs[n].Member.NodeID == r.Member.NodeID {
			n++
		}
		var ms []InstanceMember
		for _, m := range rs[:n] {
			if !workerDriven(m.Backend) {
				ms = append(ms, m.Member)
			}
		}
		rs = rs[n:]
		if len(ms) == 0 {
			continue
		}
		var ws []nodeapi.Workload
		if err := json.Unmarshal(r.Workloads, &ws); err != nil {
			errs = append(errs, fmt.Errorf("node %s: its stored workloads: %w", r.Member.NodeID, err))
			continue
		}
		errs = append(errs, s.failGoneMembers(ctx, r.Member.NodeID, ms, ws, r.ReportedAt, now))
	}
	return errors.Join(errs...)
}

// maybeCheckMembers runs checkMembers when memberCheckEvery passed since
// this replica last ran it.
func (s *Service) maybeCheckMembers(ctx context.Context) error {
	now := s.Now()
	if last := s.membersChecked.Load(); last != 0 && now.Sub(time.Unix(0, last)) < memberCheckEvery {
		return nil
	}
	s.membersChecked.Store(now.UnixNano())
	return s.checkMembers(ctx)
}

// runningAgentMembersOn lists the running added members on a node that its
// agent runs.
func (s *Service) runningAgentMembersOn(ctx context.Context, q Queries, nodeID string) ([]InstanceMember, error) {
	ms, err := q.AddedMembersOn(ctx, "", nodeID)
	if err != nil {
		return nil, err
	}
	running := slices.DeleteFunc(ms, func(m InstanceMember) bool { return m.Status != MemberRunning })
	if len(running) == 0 {
		return nil, nil
	}
	return s.agentMembers(ctx, q, running)
}

// memberGone says whether a running member's workload is gone by a report
// its node sent at reportedAt, and why: the node reports its container
// exited or dead (container_exited), or no longer reports it at all once
// memberGrace passed since the member was marked running
// (workload_missing). A report older than the member's running mark may
// predate its container and judges nothing.
func memberGone(m InstanceMember, nodeID string, workloads []nodeapi.Workload, reportedAt, now time.Time) (reason, msg string, gone bool) {
	if reportedAt.Before(m.UpdatedAt) {
		return "", "", false
	}
	reason, state := ReasonWorkloadMissing, ""
	for _, w := range workloads {
		if strings.TrimPrefix(w.Name, "/") == m.WorkloadName {
			reason, state = ReasonContainerExited, w.State
		}
	}
	if state == "running" || state == "created" || state == "restarting" || (state == "" && now.Sub(m.UpdatedAt) < memberGrace) {
		return "", "", false
	}
	if state == "" {
		return reason, fmt.Sprintf("node %s no longer reports the member's container", nodeID), true
	}
	return reason, fmt.Sprintf("node %s reports the member's container %s", nodeID, state), true
}

// failGoneMembers fails each of ms (running members on nodeID) whose
// workload the node's report, sent at reportedAt, says is gone.
func (s *Service) failGoneMembers(ctx context.Context, nodeID string, ms []InstanceMember, workloads []nodeapi.Workload, reportedAt, now time.Time) error {
	for _, m := range ms {
		reason, msg, gone := memberGone(m, nodeID, workloads, reportedAt, now)
		if !gone {
			continue
		}
		if err := s.Store.Mutate(ctx, func(tx Tx) error {
			// The instance's lock orders this against the driver settling
			// the member and against another replica failing it too.
			inst, err := tx.LockAppInstance(ctx, m.InstanceID)
			if err != nil {
				return err
			}
			cur, err := tx.GetInstanceMember(ctx, m.InstanceID, m.ID)
			if err != nil || cur.Status != MemberRunning || cur.TaskID != m.TaskID || !cur.UpdatedAt.Equal(m.UpdatedAt) {
				return err // moved on meanwhile
			}
			cur.Status, cur.ReasonCode, cur.ReasonMessage, cur.UpdatedAt = MemberFailed, reason, msg, now
			if err := tx.UpdateInstanceMember(ctx, cur); err != nil {
				return err
			}
			if err := s.recordMember(ctx, tx, inst, InstanceOperation{ID: inst.CurrentOperationID}, EventMemberFailed, cur); err != nil {
				return err
			}
			return tx.Audit(storage.AuditEvent{Action: "app_instance.member_failed", ResourceType: "app_instance", ResourceID: inst.ID,
				OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: reason + ": member " + cur.Name}, nil, auditState(inst))
		}); err != nil {
			return err
		}
	}
	return nil
}
