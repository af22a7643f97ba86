// Package instances is the app-instance domain: an entitled, published app
// version launched onto one of a project's allocations, driven through its
// lifecycle (requested → deploying → running ⇄ upgrading / rolling_back →
// decommissioning → decommissioned, or failed) by a durable worker that
// queues typed node tasks and reads their results. Every transition writes
// the instance, its timeline row, its audit row and its outbox event in one
// transaction.
package instances

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/wakeup"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// Allocation is what the instances domain needs to know of a project's GPU
// allocation and the node it lives on.
type Allocation struct {
	ID        string
	OrgID     string
	ProjectID string
	NodeID    string
	Shape     string // gpu_slice | baremetal
	State     nodes.AllocationState
	GPUUUIDs  []string
	NodeState nodes.NodeState
	Inventory nodeapi.Inventory
}

// Allocations reads allocations; the nodes domain implements it. Reads
// join the caller's transaction tx; a nil tx reads outside any.
type Allocations interface {
	// Allocation returns one allocation, storage.ErrNotFound when none.
	Allocation(ctx context.Context, tx storage.Tx, id string) (Allocation, error)
	// ProjectAllocations lists a project's live allocations.
	ProjectAllocations(ctx context.Context, tx storage.Tx, projectID string) ([]Allocation, error)
}

// AllocationReleases finishes the release of an allocation once the
// instances on it are torn down; the nodes domain implements it.
type AllocationReleases interface {
	// AllocationTornDown joins the caller's transaction; it does nothing
	// for an allocation that is not releasing.
	AllocationTornDown(ctx context.Context, tx storage.Tx, allocationID string) error
}

// TaskOutcome is what became of a queued node task.
type TaskOutcome struct {
	Done   bool // false while queued or leased
	Result nodeapi.TaskResult
}

// TaskQueue is the durable per-node task queue; the nodes domain implements
// it. Enqueue joins the caller's transaction, so a task exists exactly when
// the transition that needed it committed.
type TaskQueue interface {
	Enqueue(ctx context.Context, tx storage.Tx, nodeID, kind, instanceID, projectID string, payload any) (string, error)
	Outcome(ctx context.Context, taskID string) (TaskOutcome, error)
}

// PullGrants mints pull-only credentials for an artifact, bound to the node
// that will pull it. Optional: without it the node pulls with its own
// registry access.
type PullGrants interface {
	NodePull(ctx context.Context, nodeID string, a artifacts.AppArtifact) (nodeapi.ImagePull, error)
}

// Deps are what the service needs.
type Deps struct {
	Store       Store
	IAM         *iam.Service
	SA          *serviceaccounts.Service
	Allocations Allocations
	Tasks       TaskQueue
	Pulls       PullGrants
	Logger      *slog.Logger
	Now         func() time.Time
	// APIBaseURL is the URL workloads call the API by (delivered in their
	// identity file). A function: the public URL is known once listening.
	APIBaseURL func() string
	// RegistryHost is the platform registry's host[:port], which prefixes
	// the registered repositories of Compose artifacts.
	RegistryHost func() string
	// ReadinessTimeout overrides the profile-derived deploy timeout (tests).
	ReadinessTimeout time.Duration
	// LaunchGate is billing's budget check (issue 13, launchgate.go); nil
	// checks nothing.
	LaunchGate LaunchGate
	// Releases finishes an allocation's release once its instances are torn
	// down (the nodes domain); nil when there is none.
	Releases AllocationReleases
	// UIBasePath, when set, says under which path the UI gateway serves an
	// instance's UI on a shared origin (path mode); workloads with an
	// embedded UI get it as GPUAAS_UI_BASE_PATH.
	UIBasePath func(instanceID string) string
	// Wake carries "an operation can move" to every replica's driver
	// (wakeup.InstanceOperations); nil: a hub for this process only.
	Wake *wakeup.Hub
	// DriveInterval overrides the driver's fallback look (DriveInterval).
	DriveInterval time.Duration
	// WorkerOperationTimeout is the longest an external worker's operation
	// may take (default DefaultWorkerOperationTimeout); WorkerLease how
	// long one acquisition or heartbeat holds it (default
	// DefaultWorkerLease).
	WorkerOperationTimeout time.Duration
	WorkerLease            time.Duration
	// RuntimeEventRate and RuntimeEventBurst limit the runtime events one
	// instance may report to this replica (runtimelimit.go); a rate of 0
	// takes every event.
	RuntimeEventRate  float64
	RuntimeEventBurst int
	// RuntimeEventRetention is how many runtime-reported timeline rows one
	// instance keeps (RetentionWorker); 0 keeps every row.
	RuntimeEventRetention int
	// Leader reports whether this replica should run the runtime-event
	// retention now (nil: always); the server hands it the event relay's
	// leadership, as it does the audit pruner's.
	Leader func() bool
}

// Service is the app-instance domain.
type Service struct {
	Deps
	// driver runs the durable instance operations (Worker); kick wakes it.
	driver *worker.Periodic
	// heartbeats degrades instances whose heartbeat is overdue.
	heartbeats *worker.Periodic
	// deadlines fails external workers' operations past their deadline.
	deadlines *worker.Periodic
	// membersChecked is when this replica last ran checkMembers (UnixNano).
	membersChecked atomic.Int64
	// runtimeLimit is the per-instance bucket of runtime events (nil: no
	// limit); retention deletes the oldest runtime-reported rows past the
	// cap.
	runtimeLimit *runtimeLimiter
	retention    *worker.Periodic
	// listening is when this replica's heartbeat sweep first ran
	// (UnixNano; 0 before): see SweepHeartbeats.
	listening atomic.Int64
}

// New builds the service.
func New(d Deps) *Service {
	d.Now = clock.Or(d.Now)
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.APIBaseURL == nil {
		d.APIBaseURL = func() string { return "" }
	}
	if d.Wake == nil {
		d.Wake = wakeup.New()
	}
	if d.DriveInterval <= 0 {
		d.DriveInterval = DriveInterval
	}
	if d.WorkerOperationTimeout <= 0 {
		d.WorkerOperationTimeout = DefaultWorkerOperationTimeout
	}
	if d.WorkerLease <= 0 {
		d.WorkerLease = DefaultWorkerLease
	}
	s := &Service{Deps: d, runtimeLimit: newRuntimeLimiter(d.RuntimeEventRate, d.RuntimeEventBurst)}
	s.driver = s.newWorker()
	s.heartbeats = s.newHeartbeatWorker()
	s.retention = s.newRetentionWorker()
	s.deadlines = s.newDeadlineWorker()
	d.Wake.OnNotify(wakeup.InstanceOperations, s.driver.Kick)
	return s
}

// kick tells every replica's driver that an operation can move. Call it
// once the change committed (tx.AfterCommit inside a transaction): a
// driver woken earlier would not see it yet.
func (s *Service) kick() { s.Wake.Notify(wakeup.InstanceOperations) }

// LiveInstances implements catalog.InstanceGate: a version cannot be
// retired while a live instance runs it. It reads in the catalog's retire
// transaction.
func (s *Service) LiveInstances(ctx context.Context, tx storage.Tx, appSlug, version string) (int, error) {
	return s.Store.Join(tx).CountLiveInstancesOfVersion(ctx, appSlug, version)
}

// LiveInstancesUsingDigest implements artifacts.InstanceUsage: an artifact
// cannot be retired, nor its manifest deleted, while a live instance of its
// app runs its digest. It reads in the artifact's retire transaction, or
// outside one (tx nil) for a delete.
func (s *Service) LiveInstancesUsingDigest(ctx context.Context, tx storage.Tx, appSlug, digest string) (int, error) {
	if tx == nil {
		return s.Store.Read().CountLiveInstancesUsingDigest(ctx, appSlug, digest)
	}
	return s.Store.Join(tx).CountLiveInstancesUsingDigest(ctx, appSlug, digest)
}

var _ artifacts.InstanceUsage = (*Service)(nil)
