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
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/runtime"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// Driver settings.
const (
	// DriveInterval is how often the driver looks for work when no notice
	// of wakeup.InstanceOperations came: the slow fallback for a notice
	// lost with a replica, and for an operation lease left by a replica
	// that died. Every change that lets an operation move notifies.
	DriveInterval = 5 * time.Second
	// leaseFor bounds how long one replica holds an operation: a replica
	// killed mid-step loses it to another after this long.
	leaseFor = 30 * time.Second
	// drivePassLimit bounds the operations one pass looks at.
	drivePassLimit = 100
)

// Worker is the durable instance driver as a background job: every pass
// advances each in-progress operation as far as it can without waiting,
// and, every memberCheckEvery, checks the running added members against
// their nodes' reports (checkMembers).
func (s *Service) Worker() *worker.Periodic { return s.driver }

func (s *Service) newWorker() *worker.Periodic {
	owner := iam.NewID()
	return &worker.Periodic{Name: "instances", Interval: s.DriveInterval, Timeout: time.Minute, Logger: s.Logger,
		Run: func(ctx context.Context) error {
			return errors.Join(s.Drive(ctx, owner), s.maybeCheckMembers(ctx))
		}}
}

// Drive runs one pass as owner. Two replicas never drive one operation at
// once: each step is taken under a lease on the operation row, and each
// step's write is conditional on the phase it read.
func (s *Service) Drive(ctx context.Context, owner string) error {
	ops, err := s.Store.Read().OpenInstanceOperations(ctx, s.Now().UTC(), drivePassLimit)
	if err != nil {
		return err
	}
	var errs []error
	for _, op := range ops {
		ok, err := s.Store.Read().LeaseInstanceOperation(ctx, op.ID, owner, s.Now().UTC(), s.Now().UTC().Add(leaseFor))
		if err != nil || !ok {
			errs = append(errs, err)
			continue
		}
		for range 8 { // a few steps per pass: results may already be in
			progressed, err := s.step(ctx, op.ProjectID, op.ID)
			if err != nil {
				s.Logger.WarnContext(ctx, "instance operation step failed", "operation_id", op.ID, "app_instance_id", op.InstanceID, "err", err)
				errs = append(errs, err)
				break
			}
			if !progressed {
				break
			}
		}
		errs = append(errs, s.Store.Read().ReleaseInstanceOperation(ctx, op.ID, owner))
	}
	return errors.Join(errs...)
}

// step advances one operation by at most one phase; it reports whether it
// did (false: waiting on a node task, or finished).
func (s *Service) step(ctx context.Context, projectID, opID string) (bool, error) {
	q := s.Store.Read()
	op, err := q.GetInstanceOperation(ctx, projectID, opID)
	if err != nil || op.State != OpInProgress {
		return false, err
	}
	inst, err := q.GetAppInstanceByID(ctx, op.InstanceID)
	if err != nil {
		return false, err
	}
	// Every step acts for the platform, under the correlation id of the
	// request that started the operation.
	ctx = correlation.With(principal.With(ctx, principal.SystemActor), op.CorrelationID)
	if memberOp(op.Kind) {
		return s.stepMembers(ctx, inst, op)
	}
	switch op.Phase {
	case phaseStart:
		return true, s.start(ctx, inst, op)
	case phaseRemoveOld, phaseRevertClean, phaseTeardown, phaseVerify, phaseRun, phaseRevertRun:
		out, done, err := s.outcomes(ctx, op.TaskID)
		if err != nil || !done {
			return false, err
		}
		return true, s.resume(ctx, inst, op, out)
	case phaseAwaitStart, phaseRevertAwaitStart:
		return s.awaitStart(ctx, inst, op)
	}
	return false, fmt.Errorf("operation %s: unknown phase %q", op.ID, op.Phase)
}

// outcomes reads the results of the tasks a phase waits on (comma-joined
// ids); done when all have ended. The first failure wins.
func (s *Service) outcomes(ctx context.Context, ids string) (nodeapi.TaskResult, bool, error) {
	if ids == "" {
		return nodeapi.TaskResult{State: nodeapi.ResultSucceeded}, true, nil
	}
	var out nodeapi.TaskResult
	for i, id := range strings.Split(ids, ",") {
		o, err := s.Tasks.Outcome(ctx, id)
		if err != nil || !o.Done {
			return nodeapi.TaskResult{}, false, err
		}
		if i == 0 || (o.Result.State != nodeapi.ResultSucceeded && out.State == nodeapi.ResultSucceeded) {
			out = o.Result
		}
	}
	return out, true, nil
}

// start queues the first node work of an operation.
func (s *Service) start(ctx context.Context, inst AppInstance, op InstanceOperation) error {
	switch op.Kind {
	case OpCreate:
		if inst.DeploySeq > 0 { // recovery of a known workload: remove it first
			return s.teardownThen(ctx, inst, op, phaseRemoveOld, inst.Status, "")
		}
		return s.deployStep(ctx, inst, op, inst.Version, StatusDeploying, EventDeploying, phaseRun)
	case OpUpgrade, OpRollback:
		return s.teardownThen(ctx, inst, op, phaseRemoveOld, inst.Status, "")
	case OpDecommission:
		if inst.DeploySeq == 0 || inst.NodeID == "" {
			return s.finishDecommission(ctx, inst, op)
		}
		return s.teardownThen(ctx, inst, op, phaseTeardown, inst.Status, "")
	}
	return fmt.Errorf("operation %s: unknown kind %q", op.ID, op.Kind)
}

// resume acts on the result of the tasks a phase waited on.
func (s *Service) resume(ctx context.Context, inst AppInstance, op InstanceOperation, res nodeapi.TaskResult) error {
	ok := res.State == nodeapi.ResultSucceeded
	if ok && (op.Phase == phaseRun || op.Phase == phaseRevertRun) {
		// Digest is truth: a node that reports another image than the
		// ones pinned has failed the step, whatever else it says.
		msg, err := s.digestMismatch(ctx, inst, res)
		if err != nil {
			return err
		}
		if msg != "" {
			res = nodeapi.TaskResult{State: nodeapi.ResultFailed, ReasonCode: nodeapi.ReasonDigestMismatch, Message: msg, LogTail: res.LogTail}
			ok = false
		}
	}
	switch op.Phase {
	case phaseRemoveOld:
		if !ok && res.ReasonCode != nodeapi.ReasonNotFound {
			return s.fail(ctx, inst, op, res.ReasonCode, "removing the previous workload failed: "+res.Message, res.LogTail)
		}
		switch op.Kind {
		case OpCreate: // a recovery: NodeUp announced the redeploy already
			return s.deployStep(ctx, inst, op, inst.Version, StatusDeploying, "", phaseRun)
		default:
			return s.deployStep(ctx, inst, op, op.TargetVersion, inst.Status, "", phaseRun)
		}
	case phaseRun, phaseAwaitStart:
		if ok {
			if op.Phase == phaseRun {
				if wait, err := s.waitsForStart(ctx, inst, op.TargetVersion); err != nil || wait {
					return s.toAwaitStart(ctx, inst, op, phaseAwaitStart, err)
				}
			}
			return s.reachRunning(ctx, inst, op, res, "")
		}
		if op.Kind == OpUpgrade {
			// Health gate: the new version did not become ready. Remove it
			// and bring the previous version back.
			inst.LogTail = logTail(res.LogTail)
			op.ReasonCode = reasonOf(res)
			return s.teardownThen(ctx, inst, op, phaseRevertClean, inst.Status,
				fmt.Sprintf("%s did not become ready (%s); reverting to %s", op.TargetVersion, op.ReasonCode, op.FromVersion))
		}
		return s.fail(ctx, inst, op, reasonOf(res), res.Message, res.LogTail)
	case phaseRevertClean:
		return s.deployStep(ctx, inst, op, op.FromVersion, inst.Status, "", phaseRevertRun)
	case phaseRevertRun, phaseRevertAwaitStart:
		if ok {
			if op.Phase == phaseRevertRun {
				if wait, err := s.waitsForStart(ctx, inst, op.FromVersion); err != nil || wait {
					return s.toAwaitStart(ctx, inst, op, phaseRevertAwaitStart, err)
				}
			}
			return s.reachRunning(ctx, inst, op, res, ReasonUpgradeReverted)
		}
		return s.fail(ctx, inst, op, reasonOf(res), "reverting to "+op.FromVersion+" failed too: "+res.Message, res.LogTail)
	case phaseTeardown:
		nodes, err := s.instanceNodes(ctx, inst)
		if err != nil {
			return err
		}
		var tasks []placed
		for _, n := range nodes {
			tasks = append(tasks, placed{n, runtime.Verify(inst.ID)})
		}
		return s.queue(ctx, inst, op, phaseVerify, "", tasks, "app_instance.teardown_verify")
	case phaseVerify:
		var v nodeapi.VerifyOutput
		_ = json.Unmarshal(res.Output, &v)
		if ok && len(v.Remaining) == 0 { // every node's verify succeeded (the first failure wins)
			return s.finishDecommission(ctx, inst, op)
		}
		// Never a claim without proof: tear down again, then verify again.
		desc := fmt.Sprintf("teardown incomplete (%s), retrying: %s", reasonOf(res), strings.Join(v.Remaining, ", "))
		return s.teardownThen(ctx, inst, op, phaseTeardown, inst.Status, desc)
	}
	return fmt.Errorf("operation %s: unknown phase %q", op.ID, op.Phase)
}

// digestMismatch compares the image digests the node reports running for
// the current workload with the digests its members pinned; it says how
// they differ, or "" when they are the same set.
func (s *Service) digestMismatch(ctx context.Context, inst AppInstance, res nodeapi.TaskResult) (string, error) {
	var out nodeapi.RunOutput
	if err := json.Unmarshal(res.Output, &out); err != nil {
		return "the node's run report is unreadable: " + err.Error(), nil
	}
	members, _, err := s.Store.Read().ListInstanceMembers(ctx, inst.ID, storage.Page{Limit: storage.MaxPageLimit})
	if err != nil {
		return "", err
	}
	current := workloadName(inst.ID, inst.DeploySeq)
	var pinned []string
	for _, m := range members {
		if m.WorkloadName == current && !slices.Contains(pinned, m.Digest) {
			pinned = append(pinned, m.Digest)
		}
	}
	reported := slices.Clone(out.ImageDigests)
	slices.Sort(pinned)
	slices.Sort(reported)
	reported = slices.Compact(reported)
	if slices.Equal(pinned, reported) {
		return "", nil
	}
	if len(reported) == 0 {
		return fmt.Sprintf("the node reported success without the image digests it runs; pinned %s", strings.Join(pinned, ", ")), nil
	}
	return fmt.Sprintf("the node runs %s; the version pins %s", strings.Join(reported, ", "), strings.Join(pinned, ", ")), nil
}

func reasonOf(res nodeapi.TaskResult) string {
	if res.ReasonCode != "" {
		return res.ReasonCode
	}
	return ReasonDeployFailed
}

func logTail(lines []string) []byte {
	if len(lines) > maxLogTailLines {
		lines = lines[len(lines)-maxLogTailLines:]
	}
	if lines == nil {
		return nil
	}
	b, _ := json.Marshal(lines)
	return b
}

// workloadName names the n-th deployment of an instance: the container or
// Compose project. Unique per deployment, so a failed one can be removed
// beside the one replacing it.
func workloadName(instanceID string, n int) string {
	return fmt.Sprintf("gpuaas-%s-%d", instanceID, n)
}

// teardownThen queues the removal of every workload of the instance not
// yet removed — its own deployment's on its node, each added member's on
// the member's node — then moves to phase.
func (s *Service) teardownThen(ctx context.Context, inst AppInstance, op InstanceOperation, phase OperationPhase, status InstanceStatus, description string) error {
	members, _, err := s.Store.Read().ListInstanceMembers(ctx, inst.ID, storage.Page{Limit: storage.MaxPageLimit})
	if err != nil {
		return err
	}
	kind := s.profileKind(ctx, inst)
	var tasks []placed
	seen := map[string]bool{}
	for _, m := range members {
		if m.Status == MemberRemoved || seen[m.WorkloadName] {
			continue
		}
		seen[m.WorkloadName] = true
		if m.Added {
			tasks = append(tasks, placed{m.NodeID, runtime.Teardown(manifest.ProfileLaunchableOCI, inst.ID, m.WorkloadName)})
			continue
		}
		tasks = append(tasks, placed{inst.NodeID, runtime.Teardown(kind, inst.ID, m.WorkloadName)})
	}
	if phase == phaseTeardown {
		// Decommission: finally everything labelled for the instance, with
		// its scratch path and config files, whatever made it, on every
		// node it ran on.
		nodes, err := s.instanceNodes(ctx, inst)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			tasks = append(tasks, placed{n, runtime.TeardownInstance(inst.ID)})
		}
	}
	inst.Status = status
	if description != "" {
		op.Description = description
	}
	return s.queue(ctx, inst, op, phase, "", tasks, "app_instance.teardown")
}

// instanceNodes lists the nodes an instance runs on: its own, then those of
// its added members not yet removed.
func (s *Service) instanceNodes(ctx context.Context, inst AppInstance) ([]string, error) {
	members, _, err := s.Store.Read().ListInstanceMembers(ctx, inst.ID, storage.Page{Limit: storage.MaxPageLimit})
	if err != nil {
		return nil, err
	}
	out := []string{inst.NodeID}
	for _, m := range liveAdded(members) {
		if !slices.Contains(out, m.NodeID) {
			out = append(out, m.NodeID)
		}
	}
	return out, nil
}

// profileKind reads the runtime profile kind of the instance's version.
func (s *Service) profileKind(ctx context.Context, inst AppInstance) string {
	if inst.RuntimeBackend == manifest.BackendDockerCompose {
		return manifest.ProfileDockerCompose
	}
	return manifest.ProfileLaunchableOCI
}

// queue enqueues tasks, each on its node, and moves the operation to
// phase, in one transaction with its audit row (and event, if any).
func (s *Service) queue(ctx context.Context, inst AppInstance, op InstanceOperation, phase OperationPhase, event string, tasks []placed, action string) error {
	prevPhase, prevStatus := op.Phase, inst.Status
	cur, err := s.Store.Read().GetAppInstanceByID(ctx, inst.ID)
	if err != nil {
		return err
	}
	prevStatus = cur.Status
	return s.Store.Mutate(ctx, func(tx Tx) error {
		var ids []string
		for _, t := range tasks {
			id, err := s.Tasks.Enqueue(ctx, tx, t.node, t.task.Kind, inst.ID, inst.ProjectID, t.task.Payload)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		op.Phase, op.TaskID, op.UpdatedAt = phase, strings.Join(ids, ","), s.Now().UTC()
		inst.UpdatedAt = op.UpdatedAt
		if err := tx.UpdateInstanceOperation(ctx, op, prevPhase); err != nil {
			return err
		}
		if err := tx.UpdateAppInstance(ctx, inst, prevStatus); err != nil {
			return err
		}
		if event != "" {
			if err := s.record(ctx, tx, inst, op, event, nil); err != nil {
				return err
			}
		}
		return tx.Audit(storage.AuditEvent{Action: action, ResourceType: "app_instance", ResourceID: inst.ID, OrgID: inst.OrgID,
			ProjectID: inst.ProjectID, Reason: op.Description}, nil, auditState(inst))
	})
}

// deployStep renders the deployment of version onto the instance's
// allocation and queues it: a fresh key for the instance's identity, node
// pull credentials, one run task. A launch that no longer resolves (an
// artifact revoked since, the allocation gone) fails the operation with its
// reason instead.
func (s *Service) deployStep(ctx context.Context, inst AppInstance, op InstanceOperation, version string, status InstanceStatus, event string, phase OperationPhase) error {
	q := s.Store.Read()
	p, err := q.GetProject(ctx, inst.ProjectID)
	if err != nil {
		return err
	}
	var doc LaunchDoc
	if err := json.Unmarshal(inst.Effective, &doc); err != nil {
		return err
	}
	t, err := s.resolve(ctx, q, p, inst.AppSlug, version, doc.Request, inst.TargetAllocationID, true, gpuCheck{})
	if err != nil {
		return s.refused(ctx, inst, op, phase, refusalReason(err), err.Error())
	}
	// Pull credentials are minted first, bound to the node: if the
	// transaction below fails they are simply never used, and expire.
	images := map[string]nodeapi.ImagePull{}
	for art, a := range t.artifacts {
		pull := nodeapi.ImagePull{Repository: s.imageRepository(t, art, a), Digest: a.Digest}
		if s.Pulls != nil {
			if pull, err = s.Pulls.NodePull(ctx, t.allocation.NodeID, a); err != nil {
				return s.refused(ctx, inst, op, phase, ReasonImagePullFailed, "no pull credentials: "+err.Error())
			}
		}
		images[art] = pull
	}
	// The instance's added members are part of its deployment: each is
	// redeployed at version on its own node beside it.
	all, err := s.members(ctx, q, inst.ID)
	if err != nil {
		return err
	}
	renders, err := s.renderMembers(ctx, inst, liveAdded(all), version)
	if err != nil {
		return s.refused(ctx, inst, op, phase, refusalReason(err), err.Error())
	}
	prevPhase, prevStatus := op.Phase, inst.Status
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		// resolve pinned the artifacts outside this transaction; an
		// artifact retired or revoked since fails the step, and the next
		// one's resolve refuses the operation with the reason.
		if err := holdArtifacts(ctx, tx, t.artifacts); err != nil {
			return err
		}
		// Its GPUs: the ones it has, or (a first deployment of an
		// instance launched before they were recorded, a version with
		// another gpu_count) free ones of its allocation.
		if err := claimGPUs(ctx, tx, &inst, t.allocation, t.effective.Resources.GPUCount); err != nil {
			return err
		}
		id, err := s.identity(ctx, tx, p, &inst)
		if err != nil {
			return err
		}
		inst.DeploySeq++
		inst.NodeID = t.allocation.NodeID
		name := workloadName(inst.ID, inst.DeploySeq)
		d := runtime.Deployment{InstanceID: inst.ID, ProjectID: inst.ProjectID, OrgID: inst.OrgID, NodeID: t.allocation.NodeID,
			AppSlug: inst.AppSlug, Version: version, Name: name, Profile: t.manifest.RuntimeProfile, Images: images,
			Resources: workloadResources(t.effective.Resources, t.allocation), Parameters: t.effective.Parameters, GPUUUIDs: inst.GPUUUIDs,
			HostPort: inst.HostPort, Identity: id, ReadinessTimeoutSeconds: int(s.ReadinessTimeout.Seconds())}
		if _, ok := UIOf(t.manifest); ok && s.UIBasePath != nil {
			d.UIBasePath = s.UIBasePath(inst.ID)
		}
		task, err := runtime.Render(d)
		if err != nil {
			return errdefs.FailedPrecondition(ReasonRenderFailed, "render %s %s: %v", inst.AppSlug, version, err)
		}
		taskID, err := s.Tasks.Enqueue(ctx, tx, t.allocation.NodeID, task.Kind, inst.ID, inst.ProjectID, task.Payload)
		if err != nil {
			return err
		}
		now := s.Now().UTC()
		for art, a := range t.artifacts {
			role := art
			if a.Digest == t.digest {
				role = RolePrimary
			}
			if err := tx.InsertInstanceMember(ctx, InstanceMember{ID: iam.NewID(), InstanceID: inst.ID, AllocationID: t.allocation.ID,
				NodeID: t.allocation.NodeID, Role: role, Status: MemberDeploying, Version: version, Digest: a.Digest, WorkloadName: name,
				CreatedAt: now, UpdatedAt: now}); err != nil {
				return err
			}
		}
		memberTasks, err := s.deployMembers(ctx, tx, inst, renders, now)
		if err != nil {
			return err
		}
		inst.Status, inst.UpdatedAt = status, now
		op.Phase, op.TaskID, op.UpdatedAt = phase, strings.Join(append([]string{taskID}, memberTasks...), ","), now
		if err := tx.UpdateInstanceOperation(ctx, op, prevPhase); err != nil {
			return err
		}
		if err := tx.UpdateAppInstance(ctx, inst, prevStatus); err != nil {
			return err
		}
		if event != "" {
			if err := s.record(ctx, tx, inst, op, event, nil); err != nil {
				return err
			}
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance.deploy", ResourceType: "app_instance", ResourceID: inst.ID, OrgID: inst.OrgID,
			ProjectID: inst.ProjectID, Reason: fmt.Sprintf("deploy %s as %s on node %s", version, name, t.allocation.NodeID)}, nil, auditState(inst))
	})
	if sh := (*gpuShortage)(nil); errors.As(err, &sh) {
		// Retried, the step would find the GPUs as taken: the
		// operation ends with the reason (an upgrade reverts).
		return s.refused(ctx, inst, op, phase, CodeGPUsInUse, sh.Error())
	}
	if e, ok := errdefs.As(err); ok && e.Code == ReasonRenderFailed {
		// The same launch renders the same way on every pass (its own
		// workload's or an added member's): returned, the error would
		// leave the operation in progress for good, and the instance busy,
		// so not even decommissionable.
		return s.refused(ctx, inst, op, phase, ReasonRenderFailed, e.Message)
	}
	return err
}

// refused ends a deployment the platform could not start (the launch no
// longer resolves, no pull credentials, the render failed). An upgrade's
// new version is health-gated like a failed run: its previous workload is
// already removed, so it reverts to the version before rather than leave
// nothing running. Anything else fails with the reason.
func (s *Service) refused(ctx context.Context, inst AppInstance, op InstanceOperation, phase OperationPhase, reason, message string) error {
	if op.Kind == OpUpgrade && phase == phaseRun {
		op.ReasonCode = reason
		return s.teardownThen(ctx, inst, op, phaseRevertClean, inst.Status,
			fmt.Sprintf("%s could not be deployed (%s: %s); reverting to %s", op.TargetVersion, reason, message, op.FromVersion))
	}
	return s.fail(ctx, inst, op, reason, message, nil)
}

// imageRepository is where the node pulls an artifact from: the profile's
// image reference for a launchable image, else the artifact's repository
// in the platform registry.
func (s *Service) imageRepository(t target, name string, a artifacts.AppArtifact) string {
	if name == runtime.LaunchImage {
		repo, _, _ := strings.Cut(t.manifest.RuntimeProfile.ImageRef, "@")
		return repo
	}
	first, _, _ := strings.Cut(a.Repository, "/")
	if strings.ContainsAny(first, ".:") || first == "localhost" || s.RegistryHost == nil {
		return a.Repository
	}
	return s.RegistryHost() + "/" + a.Repository
}

// identity makes the instance's service account on its first deployment
// and re-keys it on every later one; the key reaches the workload only in
// its mounted key file.
func (s *Service) identity(ctx context.Context, tx Tx, p iam.Project, inst *AppInstance) (*runtime.Identity, error) {
	if s.SA == nil {
		return nil, nil
	}
	var err error
	var k struct {
		id, keyID, alg, priv, url string
	}
	if inst.ServiceAccountID == "" {
		issued, e := s.SA.ProvisionWorkload(ctx, tx, p, "app-"+inst.ID, "app instance "+inst.DisplayName)
		err = e
		k.id, k.keyID, k.alg, k.priv, k.url = issued.Account.ID, issued.Key.ID, issued.Key.Algorithm, issued.PrivateKeyPEM, issued.TokenURL
	} else {
		issued, e := s.SA.RekeyWorkload(ctx, tx, p.ID, inst.ServiceAccountID)
		err = e
		k.id, k.keyID, k.alg, k.priv, k.url = inst.ServiceAccountID, issued.Key.ID, issued.Key.Algorithm, issued.PrivateKeyPEM, issued.TokenURL
	}
	if err != nil {
		return nil, err
	}
	inst.ServiceAccountID = k.id
	return &runtime.Identity{ServiceAccountID: k.id, ProjectID: p.ID, KeyID: k.keyID, Algorithm: k.alg, PrivateKeyPEM: k.priv,
		TokenURL: k.url, APIBaseURL: s.APIBaseURL()}, nil
}

// refusalReason maps a launch that no longer resolves at deploy time to a
// deterministic reason.
func refusalReason(err error) string {
	e, ok := errdefs.As(err)
	if !ok {
		return ReasonDeployFailed
	}
	if fields, ok := e.Details["fields"].([]errdefs.FieldError); ok && len(fields) > 0 {
		switch fields[0].Code {
		case CodeArtifactRevoked:
			return ReasonArtifactRevoked
		case CodeAllocationNotActive, CodeNotFound:
			if fields[0].Field == "/target_allocation_id" {
				return ReasonAllocationReleased
			}
		}
	}
	if e.Code == ReasonRenderFailed {
		return ReasonRenderFailed
	}
	return ReasonDeployFailed
}

// reachRunning records a successful run: access, members, history, the
// version now served, the operation's success (or, after a revert, its
// failure with the reason) and the event.
func (s *Service) reachRunning(ctx context.Context, inst AppInstance, op InstanceOperation, res nodeapi.TaskResult, revertReason string) error {
	var out nodeapi.RunOutput
	_ = json.Unmarshal(res.Output, &out)
	version := op.TargetVersion
	if revertReason != "" {
		version = op.FromVersion
	}
	prevPhase, prevStatus := op.Phase, inst.Status
	members, _, err := s.Store.Read().ListInstanceMembers(ctx, inst.ID, storage.Page{Limit: storage.MaxPageLimit})
	if err != nil {
		return err
	}
	current := workloadName(inst.ID, inst.DeploySeq)
	digest := inst.Digest
	for _, m := range members {
		if m.WorkloadName == current && m.Role == RolePrimary {
			digest = m.Digest
		}
	}
	profile, err := s.profileOf(ctx, inst.AppSlug, version)
	if err != nil {
		return err
	}
	now := s.Now().UTC()
	return s.Store.Mutate(ctx, func(tx Tx) error {
		ids, _ := json.Marshal(out.ContainerIDs)
		if err := tx.SetInstanceMembersStatus(ctx, inst.ID, current, MemberRunning, ids, now); err != nil {
			return err
		}
		// Earlier workloads were removed before this one started.
		for _, m := range members {
			if !m.Added && m.WorkloadName != current && m.Status != MemberRemoved {
				if err := tx.SetInstanceMembersStatus(ctx, inst.ID, m.WorkloadName, MemberRemoved, nil, now); err != nil {
					return err
				}
			}
		}
		event := EventRunning
		switch {
		case revertReason != "":
			event = EventRolledBack
		case op.Kind == OpUpgrade:
			event = EventUpgraded
		case op.Kind == OpRollback:
			event = EventRolledBack
		}
		inst.Version, inst.Digest, inst.Status, inst.UpdatedAt = version, digest, StatusRunning, now
		inst.ReasonCode, inst.ReasonMessage = "", ""
		if len(out.Ports) > 0 && out.Ports[0].Host > 0 {
			inst.HostPort = out.Ports[0].Host
		}
		inst.Access = s.access(inst, out, s.nodeAddress(ctx, tx, inst))
		h := append(history(inst), HistoryEntry{Version: version, Digest: digest})
		inst.History, _ = json.Marshal(h)
		op.State, op.Phase, op.TaskID, op.UpdatedAt, op.CompletedAt = OpSucceeded, phaseDone, "", now, now
		var x *extra
		if revertReason != "" {
			inst.ReasonCode = revertReason
			inst.ReasonMessage = fmt.Sprintf("upgrade to %s failed (%s); reverted to %s", op.TargetVersion, op.ReasonCode, op.FromVersion)
			op.State, op.Description = OpFailed, inst.ReasonMessage
			x = &extra{reasonCode: revertReason, reason: inst.ReasonMessage, logTail: decodeTail(inst.LogTail)}
		} else {
			inst.LogTail = nil
			op.Description = fmt.Sprintf("%s: %s %s is running", op.Kind, inst.AppSlug, version)
		}
		if err := tx.UpdateInstanceOperation(ctx, op, prevPhase); err != nil {
			return err
		}
		if err := tx.UpdateAppInstance(ctx, inst, prevStatus); err != nil {
			return err
		}
		if err := s.record(ctx, tx, inst, op, event, x); err != nil {
			return err
		}
		if err := s.armHeartbeat(ctx, tx, inst, profile, now); err != nil {
			return err
		}
		// The added members were redeployed with it (their runs succeeded,
		// or the operation would not be here).
		if _, _, err := s.settleMembers(ctx, tx, inst, op, deployingAdded(members), "", now); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance." + strings.TrimPrefix(event, "apps.instance."), ResourceType: "app_instance",
			ResourceID: inst.ID, OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: op.Description}, nil, auditState(inst))
	})
}

func decodeTail(b []byte) []string {
	var out []string
	_ = json.Unmarshal(b, &out)
	return out
}

// fail ends the operation and marks the instance failed with a
// deterministic reason and the workload's last log lines.
func (s *Service) fail(ctx context.Context, inst AppInstance, op InstanceOperation, reason, message string, tail []string) error {
	prevPhase := op.Phase
	cur, err := s.Store.Read().GetAppInstanceByID(ctx, inst.ID)
	if err != nil {
		return err
	}
	prevStatus := cur.Status
	now := s.Now().UTC()
	if reason == "" {
		reason = ReasonDeployFailed
	}
	members, err := s.members(ctx, s.Store.Read(), inst.ID)
	if err != nil {
		return err
	}
	return s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.SetInstanceMembersStatus(ctx, inst.ID, workloadName(inst.ID, inst.DeploySeq), MemberFailed, nil, now); err != nil {
			return err
		}
		// Added members being redeployed with it fail with it; recovering
		// the instance redeploys them.
		for _, m := range deployingAdded(members) {
			m.Status, m.ReasonCode, m.ReasonMessage, m.UpdatedAt = MemberFailed, reason, "the instance's "+string(op.Kind)+" failed", now
			if err := tx.UpdateInstanceMember(ctx, m); err != nil {
				return err
			}
		}
		inst.Status, inst.ReasonCode, inst.ReasonMessage, inst.UpdatedAt = StatusFailed, reason, message, now
		if tail != nil {
			inst.LogTail = logTail(tail)
		}
		op.State, op.Phase, op.ReasonCode, op.TaskID, op.UpdatedAt, op.CompletedAt = OpFailed, phaseDone, reason, "", now, now
		op.Description = fmt.Sprintf("%s failed: %s", op.Kind, reason)
		if message != "" {
			op.Description += ": " + message
		}
		if err := tx.UpdateInstanceOperation(ctx, op, prevPhase); err != nil {
			return err
		}
		if err := tx.UpdateAppInstance(ctx, inst, prevStatus); err != nil {
			return err
		}
		if err := s.record(ctx, tx, inst, op, EventFailed, &extra{reasonCode: reason, reason: message, logTail: decodeTail(inst.LogTail)}); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance.failed", ResourceType: "app_instance", ResourceID: inst.ID, OrgID: inst.OrgID,
			ProjectID: inst.ProjectID, Reason: reason}, nil, auditState(inst))
	})
}

// finishDecommission marks a verified teardown: members removed, the
// instance's identity disabled and deleted, the instance decommissioned.
func (s *Service) finishDecommission(ctx context.Context, inst AppInstance, op InstanceOperation) error {
	prevPhase, prevStatus := op.Phase, inst.Status
	now := s.Now().UTC()
	all, err := s.members(ctx, s.Store.Read(), inst.ID)
	if err != nil {
		return err
	}
	// Allocations its members held may be waiting for them to finish a
	// release (the instance's own is torn down below in any case).
	memberAllocs := memberAllocations(liveAdded(all))
	return s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.SetInstanceMembersStatus(ctx, inst.ID, "", MemberRemoved, nil, now); err != nil {
			return err
		}
		if s.SA != nil {
			if err := s.SA.RetireWorkload(ctx, tx, inst.ProjectID, inst.ServiceAccountID); err != nil {
				return err
			}
		}
		inst.Status, inst.Access, inst.UpdatedAt, inst.DecommissionedAt = StatusDecommissioned, nil, now, now
		op.State, op.Phase, op.TaskID, op.UpdatedAt, op.CompletedAt = OpSucceeded, phaseDone, "", now, now
		op.Description = "decommissioned: teardown verified, nothing of the instance remains on the node"
		if err := tx.UpdateInstanceOperation(ctx, op, prevPhase); err != nil {
			return err
		}
		if err := tx.UpdateAppInstance(ctx, inst, prevStatus); err != nil {
			return err
		}
		if err := s.record(ctx, tx, inst, op, EventDecommissioned, nil); err != nil {
			return err
		}
		if err := s.tornDown(ctx, tx, inst.TargetAllocationID); err != nil {
			return err
		}
		for _, a := range memberAllocs {
			if err := s.tornDown(ctx, tx, a); err != nil {
				return err
			}
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance.decommissioned", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID}, nil, auditState(inst))
	})
}

// tornDown tells the nodes domain the allocation's teardown is done once
// no live instance is left on it: a releasing allocation is then released.
func (s *Service) tornDown(ctx context.Context, tx Tx, allocationID string) error {
	if s.Releases == nil || allocationID == "" {
		return nil
	}
	left, err := tx.LiveInstancesOn(ctx, allocationID, "")
	if err != nil || len(left) > 0 {
		return err
	}
	members, err := tx.AddedMembersOn(ctx, allocationID, "")
	if err != nil || len(members) > 0 {
		return err
	}
	return s.Releases.AllocationTornDown(ctx, tx, allocationID)
}

func jsonOf(v any) ([]byte, error) { return json.Marshal(v) }

// profileOf reads the runtime profile of an app version (nil when it has
// none).
func (s *Service) profileOf(ctx context.Context, appSlug, version string) (*manifest.RuntimeProfile, error) {
	v, err := s.Store.Read().GetAppVersion(ctx, appSlug, version)
	if err != nil {
		return nil, err
	}
	var mv manifest.Version
	if err := json.Unmarshal(v.Manifest, &mv); err != nil {
		return nil, fmt.Errorf("stored manifest of %s %s: %w", appSlug, version, err)
	}
	return mv.RuntimeProfile, nil
}

// waitsForStart reports whether a deployment of version that the node
// started must still wait for its workload's start_completed event: the
// version says readiness comes from it, and none came for this deployment
// yet.
func (s *Service) waitsForStart(ctx context.Context, inst AppInstance, version string) (bool, error) {
	p, err := s.profileOf(ctx, inst.AppSlug, version)
	if err != nil || p == nil || p.Readiness == nil || p.Readiness.Type != manifest.ReadinessStartCompleted {
		return false, err
	}
	cur, err := s.Store.Read().GetAppInstanceByID(ctx, inst.ID)
	if err != nil {
		return false, err
	}
	return cur.Health.StartReportedSeq != cur.DeploySeq, nil
}

// toAwaitStart moves an operation whose workload the node started to wait
// for the workload's start_completed event; op.UpdatedAt marks when the
// wait began, and op.TaskID keeps the run task, whose result reachRunning
// reads once the event came.
func (s *Service) toAwaitStart(ctx context.Context, inst AppInstance, op InstanceOperation, phase OperationPhase, err error) error {
	if err != nil {
		return err
	}
	prev := op.Phase
	op.Phase, op.UpdatedAt = phase, s.Now().UTC()
	op.Description = fmt.Sprintf("%s: the workload started; waiting for it to report start_completed", op.Kind)
	return s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.UpdateInstanceOperation(ctx, op, prev); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance.await_start", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: op.Description}, nil, auditState(inst))
	})
}

// awaitStart moves an operation on once the workload reported
// start_completed for its current deployment, or treats the deployment as
// not ready once the readiness budget passed. It reports whether it moved.
func (s *Service) awaitStart(ctx context.Context, inst AppInstance, op InstanceOperation) (bool, error) {
	if inst.Health.StartReportedSeq == inst.DeploySeq {
		out, done, err := s.outcomes(ctx, op.TaskID)
		if err != nil || !done {
			return false, err
		}
		return true, s.resume(ctx, inst, op, out)
	}
	version := op.TargetVersion
	if op.Phase == phaseRevertAwaitStart {
		version = op.FromVersion
	}
	p, err := s.profileOf(ctx, inst.AppSlug, version)
	if err != nil {
		return false, err
	}
	var r *manifest.Readiness
	if p != nil {
		r = p.Readiness
	}
	wait := time.Duration(runtime.ReadinessBudgetSeconds(r)) * time.Second
	if s.ReadinessTimeout > 0 {
		wait = s.ReadinessTimeout
	}
	if s.Now().UTC().Before(op.UpdatedAt.Add(wait)) {
		return false, nil
	}
	// The node's view is that the workload runs; the platform's is that it
	// never said it started. That is a readiness failure, with the same
	// consequences as a failed probe (an upgrade reverts).
	failed := nodeapi.TaskResult{State: nodeapi.ResultFailed, ReasonCode: ReasonReadinessTimeout,
		Message: fmt.Sprintf("the workload did not report start_completed within %s", wait)}
	return true, s.resume(ctx, inst, op, failed)
}

// armHeartbeat starts the heartbeat clock of a deployment that reached
// running: the version's timeout, due a timeout from now. A new deployment
// is not degraded by the old one's silence.
func (s *Service) armHeartbeat(ctx context.Context, tx Tx, inst AppInstance, p *manifest.RuntimeProfile, now time.Time) error {
	cur, err := tx.LockAppInstance(ctx, inst.ID)
	if err != nil {
		return err
	}
	h, from := cur.Health, cur.Health.State
	h.HeartbeatTimeoutSeconds, h.HeartbeatDueAt = 0, time.Time{}
	if p != nil && p.Health != nil && p.Health.HeartbeatTimeoutSeconds > 0 {
		h.HeartbeatTimeoutSeconds = p.Health.HeartbeatTimeoutSeconds
		h.HeartbeatDueAt = now.Add(time.Duration(h.HeartbeatTimeoutSeconds) * time.Second)
	}
	if h.State == HealthDegraded {
		h.State, h.Reason, h.ChangedAt = HealthUnknown, "", now
		if err := s.recordHealth(ctx, tx, cur, from, h); err != nil {
			return err
		}
	}
	return tx.UpdateAppInstanceHealth(ctx, inst.ID, h)
}
