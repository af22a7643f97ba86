package instances

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/wakeup"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// External workers. A version whose runtime backend no node agent runs
// (slurm, ray, bare_metal) and whose manifest declares an
// external_worker_contract is driven by a worker the app team runs outside
// the platform: every operation of its instances (create, upgrade,
// rollback, decommission, cleanup) has executor "worker", and the driver
// leaves it alone. A service account a platform admin granted to the app
// acquires the app's next operation under a lease, heartbeats to keep it
// (and learns whether it was cancelled), and completes or fails it with an
// opaque state the platform hands to the instance's next operation.
//
// Rules (after the Open Service Broker's): the platform's operation id is
// the idempotency key — a worker that acquires again while it holds a live
// lease gets the same operation and lease back, so a crashed worker resumes
// its operation; a lease that expires makes the operation available to any
// worker of the app; an operation past its deadline fails with
// operation_timeout, and when it was a create, upgrade or rollback a
// cleanup operation follows (orphan mitigation).

// External worker settings.
const (
	// DefaultWorkerOperationTimeout bounds one worker operation.
	DefaultWorkerOperationTimeout = time.Hour
	// DefaultWorkerLease is how long an acquisition or a heartbeat holds
	// an operation.
	DefaultWorkerLease = time.Minute
	// MaxWorkerWait bounds how long an acquire waits for an operation.
	MaxWorkerWait = 20 * time.Second
	// workerRetryAfter is what an empty acquire tells the worker to wait.
	workerRetryAfter = 5 * time.Second
	// maxWorkerState bounds the opaque state a worker leaves.
	maxWorkerState = 64 << 10
	// deadlineSweep is how often overdue operations are looked for.
	deadlineSweep = 5 * time.Second
)

// ExposureExternalWorker is the access of an instance whose worker
// reported where it answers.
const ExposureExternalWorker = "external_worker"

// Reasons of worker operations.
const (
	ReasonOperationTimeout = "operation_timeout"
	codeLeaseLost          = "lease_lost"
	codeNotAppWorker       = "not_app_worker"
)

var workerReason = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// errTaken ends a lease attempt another worker won (nothing written).
var errTaken = errors.New("operation taken by another worker")

// workerDriven reports whether instances of a runtime backend are driven
// by an external worker rather than by node agents.
func workerDriven(backend string) bool {
	return backend != "" && backend != manifest.BackendLaunchableOCI && backend != manifest.BackendDockerCompose
}

// WorkerArtifact is an artifact of the version, pinned by digest.
type WorkerArtifact struct {
	Name       string `json:"name"`
	Repository string `json:"repository"`
	Digest     string `json:"digest"`
}

// WorkerTask is an acquired operation with what the worker needs to carry
// it out.
type WorkerTask struct {
	Op       InstanceOperation
	Instance AppInstance
	// State is what the worker left on the instance's previous operation.
	State []byte
	// Members: a member operation's members (the child operation's
	// subjects); for the instance's own operations, its live members, which
	// an upgrade or rollback carries along and a decommission takes down.
	Members   []InstanceMember
	Contract  *manifest.ExternalWorkerContract
	Artifacts []WorkerArtifact
}

// WorkerLease is the answer to a heartbeat.
type WorkerLease struct {
	OperationID string
	LeaseID     string
	ExpiresAt   time.Time
	// Cancelled: the platform no longer wants the operation (it failed past
	// its deadline, or the instance moved on); stop and report.
	Cancelled bool
}

// WorkerResult is what a worker reports when it completes or fails.
type WorkerResult struct {
	LeaseID    string          `json:"lease_id"`
	State      json.RawMessage `json:"state,omitempty"`
	AccessURL  string          `json:"access_url,omitempty"`
	ReasonCode string          `json:"reason_code,omitempty"`
	Message    string          `json:"message,omitempty"`
}

// GrantWorker lets a service account work an app's operations. Granting
// twice answers the grant that exists.
func (s *Service) GrantWorker(ctx context.Context, g *iam.Grants, appSlug, saID string) (AppWorkerGrant, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermManifestWrite, "app_worker_grant"); err != nil {
		return AppWorkerGrant{}, err
	}
	q := s.Store.Read()
	if _, err := q.GetAppBySlug(ctx, appSlug); errors.Is(err, storage.ErrNotFound) {
		return AppWorkerGrant{}, errdefs.NotFound("app_not_found", "app %q is not in the catalog", appSlug)
	} else if err != nil {
		return AppWorkerGrant{}, err
	}
	if existing, err := q.GetAppWorkerGrant(ctx, appSlug, saID); err == nil {
		// A repeat changes nothing, but the request is still recorded.
		return existing, s.Store.Mutate(ctx, func(tx Tx) error {
			return tx.Audit(storage.AuditEvent{Action: "app.worker_grant", ResourceType: "app", ResourceID: appSlug,
				ProjectID: existing.ProjectID, Reason: "already_granted: " + saID}, nil, nil)
		})
	}
	if s.SA == nil {
		return AppWorkerGrant{}, errdefs.FailedPrecondition("service_accounts_unavailable", "this server has no service accounts")
	}
	acc, err := s.SA.Lookup(ctx, saID)
	if errors.Is(err, storage.ErrNotFound) {
		return AppWorkerGrant{}, errdefs.NotFound("service_account_not_found", "service account %q does not exist", saID)
	}
	if err != nil {
		return AppWorkerGrant{}, err
	}
	grant := AppWorkerGrant{AppSlug: appSlug, ServiceAccountID: acc.ID, ProjectID: acc.ProjectID, GrantedBy: principal.From(ctx).Key(), CreatedAt: s.Now().UTC()}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.PutAppWorkerGrant(ctx, grant); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app.worker_grant", ResourceType: "app", ResourceID: appSlug, OrgID: acc.OrgID,
			ProjectID: acc.ProjectID, Reason: "service account " + acc.ID + " may work " + appSlug + "'s operations"}, nil,
			map[string]any{"app_slug": appSlug, "service_account_id": acc.ID, "project_id": acc.ProjectID})
	})
	return grant, err
}

// RevokeWorker takes a grant back; operations the account holds become
// available to other workers when their lease expires.
func (s *Service) RevokeWorker(ctx context.Context, g *iam.Grants, appSlug, saID string) error {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermManifestWrite, "app_worker_grant"); err != nil {
		return err
	}
	return s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.DeleteAppWorkerGrant(ctx, appSlug, saID); errors.Is(err, storage.ErrNotFound) {
			return errdefs.NotFound("app_worker_grant_not_found", "service account %q is not a worker of %s", saID, appSlug)
		} else if err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app.worker_revoke", ResourceType: "app", ResourceID: appSlug,
			Reason: "service account " + saID}, nil, nil)
	})
}

// WorkerGrants lists an app's workers.
func (s *Service) WorkerGrants(ctx context.Context, g *iam.Grants, appSlug string, p storage.Page) ([]AppWorkerGrant, string, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermManifestWrite, "app_worker_grant"); err != nil {
		return nil, "", err
	}
	return s.Store.Read().ListAppWorkerGrants(ctx, appSlug, p)
}

// appWorker resolves the caller as a worker granted appSlug.
func (s *Service) appWorker(ctx context.Context, appSlug string) (principal.Principal, error) {
	p := principal.From(ctx)
	if p.Type != principal.ServiceAccount {
		return p, errdefs.PermissionDenied(codeNotAppWorker, "only a service account granted as a worker of %s may work its operations", appSlug)
	}
	if _, err := s.Store.Read().GetAppWorkerGrant(ctx, appSlug, p.ID); errors.Is(err, storage.ErrNotFound) {
		return p, errdefs.PermissionDenied(codeNotAppWorker, "service account %s is not a worker of %s; a platform admin grants it (PUT /api/v1/admin/apps/%s/workers/%s)", p.ID, appSlug, appSlug, p.ID)
	} else if err != nil {
		return p, err
	}
	return p, nil
}

// Acquire hands the calling worker the next operation of appSlug under a
// lease, waiting up to wait for one; false when none came. A worker that
// holds a live lease gets that operation back, same lease.
func (s *Service) Acquire(ctx context.Context, appSlug string, wait time.Duration) (WorkerTask, bool, error) {
	p, err := s.appWorker(ctx, appSlug)
	if err != nil {
		return WorkerTask{}, false, err
	}
	wait = min(max(wait, 0), MaxWorkerWait)
	// The wait is the caller's, in real time: the service's clock (which a
	// test may hold still or move) stamps the lease, not this.
	deadline := time.Now().Add(wait)
	for {
		// Take the waiter before looking, so a notify between the look and
		// the wait is not lost.
		woken := s.Wake.Wait(wakeup.InstanceOperations)
		t, ok, err := s.acquireOnce(ctx, appSlug, p)
		if err != nil || ok {
			return t, ok, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return WorkerTask{}, false, nil
		}
		select {
		case <-ctx.Done():
			return WorkerTask{}, false, nil
		case <-woken:
		case <-time.After(min(left, s.DriveInterval)):
		}
	}
}

// RetryAfter is what an empty acquire answers.
func RetryAfter() time.Duration { return workerRetryAfter }

func (s *Service) acquireOnce(ctx context.Context, appSlug string, p principal.Principal) (WorkerTask, bool, error) {
	q := s.Store.Read()
	now := s.Now().UTC()
	owner := p.Key()
	op, err := q.HeldWorkerOperation(ctx, appSlug, owner, now)
	if err == nil {
		// The worker's own operation again (it restarted): same lease,
		// extended.
		if _, err := q.ExtendWorkerLease(ctx, op.ID, op.LeaseID, now.Add(s.WorkerLease), op.Progress); err != nil {
			return WorkerTask{}, false, err
		}
		op.LeaseExpiresAt = now.Add(s.WorkerLease)
		t, err := s.workerTask(ctx, op)
		return t, err == nil, err
	}
	if !errors.Is(err, storage.ErrNotFound) {
		return WorkerTask{}, false, err
	}
	// Many workers of one app poll at once: each starts at a random place
	// among the oldest available operations, so they do not all race for
	// the first, and looks again while others keep winning.
	for range acquireRounds {
		ops, err := q.AvailableWorkerOperations(ctx, appSlug, now, acquireCandidates)
		if err != nil || len(ops) == 0 {
			return WorkerTask{}, false, err
		}
		first := rand.IntN(len(ops))
		ops = slices.Concat(ops[first:], ops[:first])
		if t, ok, err := s.leaseOne(ctx, ops, owner, now); err != nil || ok {
			return t, ok, err
		}
	}
	return WorkerTask{}, false, nil
}

// Acquire's search: candidates per look, looks per acquire.
const (
	acquireCandidates = 32
	acquireRounds     = 4
)

// leaseOne leases the first of ops no other worker takes first.
func (s *Service) leaseOne(ctx context.Context, ops []InstanceOperation, owner string, now time.Time) (WorkerTask, bool, error) {
	for _, op := range ops {
		leaseID := iam.NewID()
		until := now.Add(s.WorkerLease)
		var won bool
		// The lease and its audit row are one mutation: who took which
		// operation when is on record.
		err := s.Store.Mutate(ctx, func(tx Tx) error {
			ok, err := tx.LeaseWorkerOperation(ctx, op.ID, owner, leaseID, now, until)
			if err != nil {
				return err
			}
			if !ok {
				return errTaken
			}
			won = true
			if op.Kind == OpCreate {
				// The first acquisition of a create is its deployment
				// starting.
				inst, err := tx.LockAppInstance(ctx, op.InstanceID)
				if err != nil {
					return err
				}
				if inst.Status == StatusRequested {
					inst.Status, inst.UpdatedAt = StatusDeploying, now
					if err := tx.UpdateAppInstance(ctx, inst, StatusRequested); err != nil {
						return err
					}
					if err := s.record(ctx, tx, inst, op, EventDeploying, &extra{reason: "acquired by worker " + owner}); err != nil {
						return err
					}
				}
			}
			return tx.Audit(storage.AuditEvent{Action: "app_instance.operation_acquired", ResourceType: "app_instance", ResourceID: op.InstanceID,
				OrgID: op.OrgID, ProjectID: op.ProjectID, Reason: fmt.Sprintf("%s operation %s, attempt %d", op.Kind, op.ID, op.Attempt+1)}, nil,
				map[string]any{"operation_id": op.ID, "lease_id": leaseID, "expires_at": until})
		})
		if errors.Is(err, errTaken) || (err == nil && !won) {
			continue // another worker took it first
		}
		if err != nil {
			return WorkerTask{}, false, err
		}
		op.LeaseOwner, op.LeaseID, op.LeaseExpiresAt, op.Attempt = owner, leaseID, until, op.Attempt+1
		t, err := s.workerTask(ctx, op)
		return t, err == nil, err
	}
	return WorkerTask{}, false, nil
}

// workerTask completes an acquired operation with its instance, the state
// of the previous operation, the contract and the pinned artifacts.
func (s *Service) workerTask(ctx context.Context, op InstanceOperation) (WorkerTask, error) {
	q := s.Store.Read()
	inst, err := q.GetAppInstanceByID(ctx, op.InstanceID)
	if err != nil {
		return WorkerTask{}, err
	}
	state, err := q.LastWorkerState(ctx, inst.ID)
	if err != nil {
		return WorkerTask{}, err
	}
	version := op.TargetVersion
	if version == "" {
		version = inst.Version
	}
	t := WorkerTask{Op: op, Instance: inst, State: state}
	if memberOp(op.Kind) {
		t.Members, err = s.opMembers(ctx, q, inst, op)
	} else {
		var ms []InstanceMember
		ms, err = s.members(ctx, q, inst.ID)
		t.Members = liveAdded(ms)
	}
	if err != nil {
		return WorkerTask{}, err
	}
	v, err := q.GetAppVersion(ctx, inst.AppSlug, version)
	if err != nil {
		return WorkerTask{}, err
	}
	var mv manifest.Version
	if err := json.Unmarshal(v.Manifest, &mv); err != nil {
		return WorkerTask{}, err
	}
	t.Contract = mv.ExternalWorkerContract
	arts, err := q.AppArtifactsOfVersion(ctx, inst.AppSlug, version)
	if err != nil {
		return WorkerTask{}, err
	}
	for _, a := range arts {
		if a.Launchable() {
			t.Artifacts = append(t.Artifacts, WorkerArtifact{Name: a.ArtifactName, Repository: a.Repository, Digest: a.Digest})
		}
	}
	return t, nil
}

// heldOp reads an operation of appSlug that the calling worker holds under
// leaseID; another app's operation (or none) answers not found, one whose
// lease is not the caller's lease_lost.
func (s *Service) heldOp(ctx context.Context, appSlug, opID, leaseID string) (InstanceOperation, error) {
	p, err := s.appWorker(ctx, appSlug)
	if err != nil {
		return InstanceOperation{}, err
	}
	op, err := s.Store.Read().GetWorkerOperation(ctx, appSlug, opID)
	if errors.Is(err, storage.ErrNotFound) {
		return op, errdefs.NotFound("operation_not_found", "app %s has no worker operation %q", appSlug, opID)
	}
	if err == nil && (op.LeaseID != leaseID || op.LeaseOwner != p.Key()) {
		err = errLeaseLost(op)
	}
	return op, err
}

func errLeaseLost(op InstanceOperation) error {
	return errdefs.Conflict(codeLeaseLost, "operation %s is no longer held under this lease (it is %s; its lease expired or was taken by another worker); acquire again", op.ID, op.State).
		WithDetails(map[string]any{"operation_id": op.ID, "state": op.State})
}

// Heartbeat extends the caller's lease on an operation and records its
// progress message. It is liveness bookkeeping (no audit row). A cancelled
// operation answers Cancelled instead of an error, so the worker stops.
func (s *Service) Heartbeat(ctx context.Context, appSlug, opID, leaseID, message string) (WorkerLease, error) {
	op, err := s.heldOp(ctx, appSlug, opID, leaseID)
	if err != nil {
		return WorkerLease{}, err
	}
	if op.State != OpInProgress {
		return WorkerLease{OperationID: op.ID, LeaseID: leaseID, ExpiresAt: op.LeaseExpiresAt, Cancelled: true}, nil
	}
	if len(message) > 1024 {
		message = message[:1024]
	}
	until := s.Now().UTC().Add(s.WorkerLease)
	ok, err := s.Store.Read().ExtendWorkerLease(ctx, op.ID, leaseID, until, message)
	if err != nil {
		return WorkerLease{}, err
	}
	if !ok { // it ended between the read and the write
		return WorkerLease{OperationID: op.ID, LeaseID: leaseID, ExpiresAt: op.LeaseExpiresAt, Cancelled: true}, nil
	}
	return WorkerLease{OperationID: op.ID, LeaseID: leaseID, ExpiresAt: until}, nil
}

// checkResult validates what a worker reports.
func checkResult(r WorkerResult, failing bool) error {
	var fe []errdefs.FieldError
	if r.LeaseID == "" {
		fe = append(fe, errdefs.FieldError{Field: "/lease_id", Code: CodeRequired, Message: "is required: the lease_id acquire answered"})
	}
	if len(r.State) > maxWorkerState {
		fe = append(fe, errdefs.FieldError{Field: "/state", Code: "too_large", Message: fmt.Sprintf("is %d bytes; at most %d", len(r.State), maxWorkerState)})
	} else if len(r.State) > 0 && !json.Valid(r.State) {
		fe = append(fe, errdefs.FieldError{Field: "/state", Code: "invalid", Message: "must be JSON"})
	}
	if failing && !workerReason.MatchString(r.ReasonCode) {
		fe = append(fe, errdefs.FieldError{Field: "/reason_code", Code: "invalid", Message: "is required: a machine-readable cause, ^[a-z][a-z0-9_]{0,63}$"})
	}
	if len(r.Message) > 1024 {
		fe = append(fe, errdefs.FieldError{Field: "/message", Code: "too_long", Message: "at most 1024 characters"})
	}
	if len(r.AccessURL) > 2048 {
		fe = append(fe, errdefs.FieldError{Field: "/access_url", Code: "too_long", Message: "at most 2048 characters"})
	}
	if fe != nil {
		return errdefs.Validation(fe)
	}
	return nil
}

// Complete ends the caller's operation successfully: the instance moves
// on (running at the target version, or decommissioned) and keeps the
// worker's state for its next operation. Completing again under the same
// lease answers the operation as it ended.
func (s *Service) Complete(ctx context.Context, appSlug, opID string, r WorkerResult) (InstanceOperation, error) {
	return s.finishWorkerOp(ctx, appSlug, opID, r, false)
}

// Fail ends the caller's operation with a reason: a create leaves the
// instance failed and a cleanup operation follows; an upgrade or rollback
// leaves it running its previous version with the reason; a decommission or
// cleanup leaves it failed.
func (s *Service) Fail(ctx context.Context, appSlug, opID string, r WorkerResult) (InstanceOperation, error) {
	return s.finishWorkerOp(ctx, appSlug, opID, r, true)
}

func (s *Service) finishWorkerOp(ctx context.Context, appSlug, opID string, r WorkerResult, failing bool) (InstanceOperation, error) {
	if err := checkResult(r, failing); err != nil {
		return InstanceOperation{}, err
	}
	op, err := s.heldOp(ctx, appSlug, opID, r.LeaseID)
	if err != nil {
		return InstanceOperation{}, err
	}
	if op.State != OpInProgress {
		// A repeat (the answer to the first was lost): the operation as it
		// ended, nothing applied twice; the request is still recorded.
		err := s.Store.Mutate(ctx, func(tx Tx) error {
			return tx.Audit(storage.AuditEvent{Action: "app_instance.operation_report", ResourceType: "app_instance", ResourceID: op.InstanceID,
				OrgID: op.OrgID, ProjectID: op.ProjectID, Reason: "already_" + string(op.State)}, nil, nil)
		})
		return op, err
	}
	if st := bytes.TrimSpace(r.State); len(st) > 0 && !bytes.Equal(st, []byte("null")) {
		op.WorkerState = st // else the previous operation's state stays the instance's
	}
	if memberOp(op.Kind) {
		return s.finishWorkerMembers(ctx, op, r, failing)
	}
	inst, err := s.Store.Read().GetAppInstanceByID(ctx, op.InstanceID)
	if err != nil {
		return InstanceOperation{}, err
	}
	now := s.Now().UTC()
	prevPhase, prevStatus := op.Phase, inst.Status
	op.Phase, op.UpdatedAt, op.CompletedAt = phaseDone, now, now
	var event string
	var x *extra
	var cleanup *InstanceOperation
	if !failing {
		op.State = OpSucceeded
		op.Description = fmt.Sprintf("%s completed by worker %s", op.Kind, op.LeaseOwner)
		switch op.Kind {
		case OpCreate, OpUpgrade, OpRollback:
			version := op.TargetVersion
			event = map[OperationKind]string{OpCreate: EventRunning, OpUpgrade: EventUpgraded, OpRollback: EventRolledBack}[op.Kind]
			inst.Status, inst.Version, inst.ReasonCode, inst.ReasonMessage = StatusRunning, version, "", ""
			h := append(history(inst), HistoryEntry{Version: version, Digest: inst.Digest})
			inst.History, _ = json.Marshal(h)
			if r.AccessURL != "" {
				inst.Access, _ = json.Marshal(Access{Exposure: ExposureExternalWorker, URL: r.AccessURL, NodeID: inst.NodeID, LocalURL: r.AccessURL,
					Instructions: "the app's external worker reports it answers at " + r.AccessURL})
			}
		case OpDecommission:
			event = EventDecommissioned
			inst.Status, inst.Access, inst.DecommissionedAt = StatusDecommissioned, nil, now
		case OpCleanup:
			op.Description = "cleanup completed by worker " + op.LeaseOwner + ": what the failed operation left is gone"
		}
	} else {
		op.State, op.ReasonCode = OpFailed, r.ReasonCode
		op.Description = fmt.Sprintf("%s failed: %s: %s", op.Kind, r.ReasonCode, r.Message)
		x = &extra{reasonCode: r.ReasonCode, reason: r.Message}
		switch op.Kind {
		case OpUpgrade, OpRollback:
			// The worker reports the instance still runs what it ran.
			event = EventRolledBack
			inst.Status, inst.ReasonCode, inst.ReasonMessage = StatusRunning, r.ReasonCode, fmt.Sprintf("%s to %s failed: %s", op.Kind, op.TargetVersion, r.Message)
		default:
			event = EventFailed
			inst.Status, inst.ReasonCode, inst.ReasonMessage = StatusFailed, r.ReasonCode, r.Message
			if op.Kind == OpCreate {
				c := s.newOperation(ctx, inst, OpCleanup, inst.Version, "", fmt.Sprintf("clean up after the failed create of %s (%s)", inst.ID, r.ReasonCode))
				cleanup = &c
			}
		}
	}
	inst.UpdatedAt = now
	if cleanup != nil {
		inst.CurrentOperationID = cleanup.ID
	}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.UpdateInstanceOperation(ctx, op, prevPhase); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return errLeaseLost(op)
			}
			return err
		}
		if err := tx.UpdateAppInstance(ctx, inst, prevStatus); err != nil {
			return err
		}
		if cleanup != nil {
			if err := tx.InsertInstanceOperation(ctx, *cleanup); err != nil {
				return err
			}
		}
		if event != "" {
			if err := s.record(ctx, tx, inst, op, event, x); err != nil {
				return err
			}
		}
		if op.Kind == OpDecommission && !failing {
			// The worker took the members down with the instance.
			ms, err := s.members(ctx, tx, inst.ID)
			if err != nil {
				return err
			}
			if err := s.membersGone(ctx, tx, inst, op, liveAdded(ms), now); err != nil {
				return err
			}
			if s.SA != nil {
				if err := s.SA.RetireWorkload(ctx, tx, inst.ProjectID, inst.ServiceAccountID); err != nil {
					return err
				}
			}
			if err := s.tornDown(ctx, tx, inst.TargetAllocationID); err != nil {
				return err
			}
		}
		return auditReport(ctx, tx, inst, op, failing)
	})
	if err != nil {
		return InstanceOperation{}, err
	}
	if cleanup != nil {
		s.kick()
	}
	return op, nil
}

// finishWorkerMembers ends a worker's member operation (a child
// operation). Completed: an add or recover leaves its members running, a
// remove leaves them removed (their keys expired, a releasing allocation
// torn down once nothing is left on it). Failed: the members are failed
// with the worker's reason, to be recovered or removed. The instance stays
// as it was either way.
func (s *Service) finishWorkerMembers(ctx context.Context, op InstanceOperation, r WorkerResult, failing bool) (InstanceOperation, error) {
	now := s.Now().UTC()
	prevPhase := op.Phase
	op.Phase, op.UpdatedAt, op.CompletedAt = phaseDone, now, now
	var inst AppInstance
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		var err error
		if inst, err = tx.LockAppInstance(ctx, op.InstanceID); err != nil {
			return err
		}
		ms, err := s.opMembers(ctx, tx, inst, op)
		if err != nil {
			return err
		}
		switch {
		case failing:
			op.State, op.ReasonCode = OpFailed, r.ReasonCode
			op.Description = fmt.Sprintf("%s failed: %s: %s", op.Kind, r.ReasonCode, r.Message)
			err = s.membersFailed(ctx, tx, inst, op, ms, r.ReasonCode, r.Message, now)
		case op.Kind == OpMemberRemove:
			op.State = OpSucceeded
			op.Description = fmt.Sprintf("%d member(s) removed by worker %s", len(ms), op.LeaseOwner)
			err = s.membersGone(ctx, tx, inst, op, ms, now)
		default:
			op.State = OpSucceeded
			op.Description = fmt.Sprintf("%s: %d member(s) running, reported by worker %s", op.Kind, len(ms), op.LeaseOwner)
			event := EventMemberAdded
			if op.Kind == OpMemberRecover {
				event = EventMemberRecovered
			}
			for _, m := range ms {
				m.Status, m.ReasonCode, m.ReasonMessage, m.UpdatedAt = MemberRunning, "", "", now
				if err := tx.UpdateInstanceMember(ctx, m); err != nil {
					return err
				}
				if err := s.recordMember(ctx, tx, inst, op, event, m); err != nil {
					return err
				}
			}
		}
		if err != nil {
			return err
		}
		if err := tx.UpdateInstanceOperation(ctx, op, prevPhase); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return errLeaseLost(op)
			}
			return err
		}
		return auditReport(ctx, tx, inst, op, failing)
	})
	return op, err
}

// auditReport records a worker's complete or fail.
func auditReport(ctx context.Context, tx Tx, inst AppInstance, op InstanceOperation, failing bool) error {
	verb := "completed"
	if failing {
		verb = "failed"
	}
	return tx.Audit(storage.AuditEvent{Action: "app_instance.operation_" + verb, ResourceType: "app_instance", ResourceID: inst.ID,
		OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: op.Description}, nil, auditState(inst))
}

// failTimedOut fails the instance of an operation that timed out and
// returns it as written; after a create, upgrade or rollback a cleanup
// operation follows.
func (s *Service) failTimedOut(ctx context.Context, tx Tx, inst AppInstance, op InstanceOperation, now time.Time) (AppInstance, error) {
	prevStatus := inst.Status
	inst.Status, inst.ReasonCode, inst.ReasonMessage, inst.UpdatedAt = StatusFailed, ReasonOperationTimeout, op.Description, now
	switch op.Kind {
	case OpCreate, OpUpgrade, OpRollback:
		c := s.newOperation(ctx, inst, OpCleanup, inst.Version, "", fmt.Sprintf("clean up after the %s that timed out", op.Kind))
		c.CorrelationID = op.CorrelationID
		if err := tx.InsertInstanceOperation(ctx, c); err != nil {
			return inst, err
		}
		inst.CurrentOperationID = c.ID
	}
	if err := tx.UpdateAppInstance(ctx, inst, prevStatus); err != nil {
		return inst, err
	}
	return inst, s.record(ctx, tx, inst, op, EventFailed, &extra{reasonCode: ReasonOperationTimeout, reason: op.Description})
}

// DeadlineWorker fails worker operations past their deadline.
func (s *Service) DeadlineWorker() *worker.Periodic { return s.deadlines }

func (s *Service) newDeadlineWorker() *worker.Periodic {
	return &worker.Periodic{Name: "worker-deadlines", Interval: deadlineSweep, Timeout: time.Minute, Logger: s.Logger,
		Run: s.FailOverdue}
}

// FailOverdue fails every worker operation past its deadline with
// operation_timeout; a create, upgrade or rollback is followed by a cleanup
// operation, since the worker may have left something half made.
func (s *Service) FailOverdue(ctx context.Context) error {
	ops, err := s.Store.Read().OverdueWorkerOperations(ctx, s.Now().UTC(), 100)
	if err != nil {
		return err
	}
	var errs []error
	for _, op := range ops {
		errs = append(errs, s.timeOut(principal.With(ctx, principal.SystemActor), op))
	}
	if len(ops) > 0 {
		s.kick()
	}
	return errors.Join(errs...)
}

func (s *Service) timeOut(ctx context.Context, op InstanceOperation) error {
	now := s.Now().UTC()
	return s.Store.Mutate(ctx, func(tx Tx) error {
		inst, err := tx.LockAppInstance(ctx, op.InstanceID)
		if err != nil {
			return err
		}
		op, err = abortOp(ctx, tx, op, ReasonOperationTimeout,
			fmt.Sprintf("%s failed: no worker finished it by its deadline %s", op.Kind, op.DeadlineAt.Format(time.RFC3339)), now)
		if errors.Is(err, storage.ErrNotFound) {
			return nil // finished meanwhile
		}
		if err != nil {
			return err
		}
		if memberOp(op.Kind) {
			// A child operation: its members failed; the instance stays.
			var ms []InstanceMember
			if ms, err = s.opMembers(ctx, tx, inst, op); err == nil {
				err = s.membersFailed(ctx, tx, inst, op, ms, ReasonOperationTimeout, op.Description, now)
			}
		} else {
			inst, err = s.failTimedOut(ctx, tx, inst, op, now)
		}
		if err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance.operation_timeout", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: op.Description}, nil, auditState(inst))
	})
}
