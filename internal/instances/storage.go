package instances

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// AppInstance is one app version launched onto a project's allocation.
// Effective, Access, LogTail and History are JSON documents this domain
// owns.
type AppInstance struct {
	ID                 string
	OrgID              string
	ProjectID          string
	AppSlug            string
	DisplayName        string
	Version            string
	Digest             string
	Status             InstanceStatus
	ReasonCode         string
	ReasonMessage      string
	OperatingMode      string
	ControlPlaneScope  string
	RuntimeBackend     string
	TenantBoundaryMode string
	Effective          []byte
	TargetAllocationID string
	NodeID             string
	ServiceAccountID   string
	HostPort           int
	DeploySeq          int
	Access             []byte
	LogTail            []byte
	History            []byte
	CurrentOperationID string
	CreatedBy          string
	CreatedAt          time.Time
	UpdatedAt          time.Time
	DecommissionedAt   time.Time
	// GPUUUIDs are the GPUs of its allocation the instance was given:
	// none held by another instance or member there (gpus.go).
	GPUUUIDs []string
	// Health is what the workload reports about itself; only
	// UpdateAppInstanceHealth writes it.
	Health Health
}

// Health is an instance's runtime health as its workload reports it
// (runtimeevents.go). It is separate from Status: the lifecycle says where
// the platform is with the instance, health says how the app says it is.
type Health struct {
	State     HealthState
	Reason    string
	ChangedAt time.Time
	// LastHeartbeatAt is the newest heartbeat's time.
	LastHeartbeatAt time.Time
	// HeartbeatTimeoutSeconds is the running version's heartbeat timeout
	// (0: none declared); HeartbeatDueAt is when the instance degrades
	// unless a heartbeat arrives (zero: never).
	HeartbeatTimeoutSeconds int
	HeartbeatDueAt          time.Time
	// StartReportedSeq is the deployment (DeploySeq) for which the workload
	// reported start_completed.
	StartReportedSeq int
}

// InstanceOperation is one lifecycle request of an instance.
type InstanceOperation struct {
	ID             string
	InstanceID     string
	OrgID          string
	ProjectID      string
	Kind           OperationKind
	State          OperationState
	Phase          OperationPhase
	FromVersion    string
	TargetVersion  string
	Description    string
	ReasonCode     string
	TaskID         string
	CorrelationID  string
	Actor          string
	LeaseOwner     string
	LeaseExpiresAt time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CompletedAt    time.Time
	// MemberIDs are the members a member operation acts on.
	MemberIDs []string
	// Executor says who carries the operation out: the platform's driver
	// through node agents, or an external worker of the app (external.go).
	Executor string
	// AppSlug is the instance's app (what a worker acquires by).
	AppSlug string
	// A worker operation's lease (LeaseOwner is the worker's principal),
	// how many times it was acquired, its deadline, the worker's last
	// progress message and the opaque state it left on completion.
	LeaseID     string
	Attempt     int
	DeadlineAt  time.Time
	Progress    string
	WorkerState []byte
}

// Attachment makes a tenant-shared instance usable from another project of
// its org.
type Attachment struct {
	InstanceID string
	ProjectID  string
	OrgID      string
	AttachedBy string
	CreatedAt  time.Time
}

// AppWorkerGrant lets a service account work an app's operations.
type AppWorkerGrant struct {
	AppSlug          string
	ServiceAccountID string
	ProjectID        string // the account's project
	GrantedBy        string
	CreatedAt        time.Time
}

// InstanceEvent is one row of an instance's timeline; Status is the
// instance's status after the transition, as the row recorded it (an
// InstanceStatus's text).
type InstanceEvent struct {
	ID         string
	InstanceID string
	ProjectID  string
	EventType  string
	Status     InstanceStatus
	// DedupeKey is set on rows an app reported: the CloudEvent's durable
	// key, unique across the table.
	DedupeKey     string
	OperationID   string
	CorrelationID string
	Payload       []byte
	OccurredAt    time.Time
}

// InstanceMember is one workload an instance runs on a node: a row of
// the instance's own deployment (one per artifact it runs), or a member an
// operator added (Added: a worker, head or node of a cluster app, on an
// allocation of its own, with a stable Name and ID).
type InstanceMember struct {
	ID           string
	InstanceID   string
	AllocationID string
	NodeID       string
	Role         string
	Status       MemberStatus
	Version      string
	Digest       string
	WorkloadName string
	ContainerIDs []byte // JSON list
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// Name is an added member's name within its instance (worker-1).
	Name  string
	Added bool
	// ReasonCode and ReasonMessage say why the member failed.
	ReasonCode    string
	ReasonMessage string
	// TaskID is the member's last run task; KeyID the workload key its
	// container holds; GPUUUIDs the allocation's GPUs it was given.
	TaskID   string
	KeyID    string
	GPUUUIDs []string
}

// MemberReport is a running added member beside what its node last
// reported running: the node's stored workload list (JSON
// []nodeapi.Workload) and when the beat that carried it arrived. Backend
// is the member's instance's runtime backend (worker-driven instances'
// members are not the agent's to report).
type MemberReport struct {
	Member     InstanceMember
	Backend    string
	ReportedAt time.Time
	Workloads  []byte
}

// UIOpenCode is a one-time code that opens an instance's UI through the
// gateway. CodeHash is the SHA-256 of the code.
type UIOpenCode struct {
	CodeHash   string
	UserID     string
	OrgID      string
	ProjectID  string
	InstanceID string
	Port       int
	CreatedAt  time.Time
	ExpiresAt  time.Time
	UsedAt     time.Time
}

// Queries is what the instances domain reads and writes.
type Queries interface {
	InsertAppInstance(ctx context.Context, i AppInstance) error
	// UpdateAppInstance writes i only while the row still has prevStatus;
	// ErrNotFound when a concurrent transition moved it.
	UpdateAppInstance(ctx context.Context, i AppInstance, prevStatus InstanceStatus) error
	GetAppInstance(ctx context.Context, projectID, id string) (AppInstance, error)
	GetAppInstanceByID(ctx context.Context, id string) (AppInstance, error)
	// LockAppInstance reads an instance and holds it against concurrent
	// writers until the transaction ends.
	LockAppInstance(ctx context.Context, id string) (AppInstance, error)
	// UpdateAppInstanceHealth writes only the health columns of instance id.
	UpdateAppInstanceHealth(ctx context.Context, id string, h Health) error
	// HeartbeatsOverdue lists running instances not yet degraded whose
	// heartbeat was due before now and whose heartbeat timeout is at most
	// maxTimeoutSeconds.
	HeartbeatsOverdue(ctx context.Context, now time.Time, maxTimeoutSeconds, limit int) ([]AppInstance, error)
	// ListAppInstances lists a project's instances and the shared instances
	// attached to it.
	ListAppInstances(ctx context.Context, projectID string, status InstanceStatus, p storage.Page) ([]AppInstance, string, error)
	// CountLiveInstancesOfVersion counts the instances not decommissioned
	// that run appSlug@version or have an operation in progress to it.
	CountLiveInstancesOfVersion(ctx context.Context, appSlug, version string) (int, error)
	// ShareAppVersion reads a version and keeps its status from changing
	// until the transaction ends (the catalog's LockAppVersion waits), so
	// a launch or version change recorded against it cannot cross its
	// retirement.
	ShareAppVersion(ctx context.Context, appSlug, version string) (catalog.AppVersion, error)
	// ShareEntitlement and ShareOrgEntitlement read a project's (an org's)
	// entitlement to an app and keep it from changing until the
	// transaction ends (the catalog's update waits), so a launch recorded
	// under it cannot cross its disabling.
	ShareEntitlement(ctx context.Context, projectID, appSlug string) (catalog.AppEntitlement, error)
	ShareOrgEntitlement(ctx context.Context, orgID, appSlug string) (catalog.AppEntitlement, error)
	// CountLiveInstancesUsingDigest counts the instances of app appSlug
	// not decommissioned that run digest, as their own or a member's.
	CountLiveInstancesUsingDigest(ctx context.Context, appSlug, digest string) (int, error)
	LiveInstancesOn(ctx context.Context, allocationID, nodeID string) ([]AppInstance, error)
	// HostPortsHeld maps each host port held on a node by an instance not
	// yet decommissioned to that instance's id.
	HostPortsHeld(ctx context.Context, nodeID string) (map[int]string, error)
	// LockPlacement holds the placement of instances on a node (their GPUs
	// and host ports) against other placements there until the
	// transaction ends.
	LockPlacement(ctx context.Context, nodeID string) error

	InsertInstanceOperation(ctx context.Context, o InstanceOperation) error
	// UpdateInstanceOperation writes o only while the row is in progress at
	// prevPhase.
	UpdateInstanceOperation(ctx context.Context, o InstanceOperation, prevPhase OperationPhase) error
	GetInstanceOperation(ctx context.Context, projectID, id string) (InstanceOperation, error)
	OpenInstanceOperations(ctx context.Context, now time.Time, limit int) ([]InstanceOperation, error)
	LeaseInstanceOperation(ctx context.Context, id, owner string, now, until time.Time) (bool, error)

	// External workers (external.go).
	GetWorkerOperation(ctx context.Context, appSlug, id string) (InstanceOperation, error)
	HeldWorkerOperation(ctx context.Context, appSlug, owner string, now time.Time) (InstanceOperation, error)
	AvailableWorkerOperations(ctx context.Context, appSlug string, now time.Time, limit int) ([]InstanceOperation, error)
	LeaseWorkerOperation(ctx context.Context, id, owner, leaseID string, now, until time.Time) (bool, error)
	ExtendWorkerLease(ctx context.Context, id, leaseID string, until time.Time, progress string) (bool, error)
	OverdueWorkerOperations(ctx context.Context, now time.Time, limit int) ([]InstanceOperation, error)
	LastWorkerState(ctx context.Context, instanceID string) ([]byte, error)
	PutAppWorkerGrant(ctx context.Context, g AppWorkerGrant) error
	GetAppWorkerGrant(ctx context.Context, appSlug, serviceAccountID string) (AppWorkerGrant, error)
	DeleteAppWorkerGrant(ctx context.Context, appSlug, serviceAccountID string) error
	ListAppWorkerGrants(ctx context.Context, appSlug string, p storage.Page) ([]AppWorkerGrant, string, error)
	ReleaseInstanceOperation(ctx context.Context, id, owner string) error

	InsertInstanceEvent(ctx context.Context, e InstanceEvent) error
	// InsertReportedInstanceEvents appends rows that carry a dedupe key,
	// skipping each whose key exists; it returns the ids it wrote.
	InsertReportedInstanceEvents(ctx context.Context, events []InstanceEvent) (map[string]bool, error)
	// ReportedEventKeyOwners returns, for each of keys a timeline row is
	// stored under, that row's instance.
	ReportedEventKeyOwners(ctx context.Context, keys []string) (map[string]string, error)
	ListInstanceEvents(ctx context.Context, instanceID string, p storage.Page) ([]InstanceEvent, string, error)
	// InstancesOverReportedCap lists up to limit instances holding more
	// than keep timeline rows recorded from runtime events (rows with a
	// dedupe key), among those that recorded one with an id from since on
	// (every instance when since is empty).
	InstancesOverReportedCap(ctx context.Context, keep, limit int, since string) ([]string, error)
	// NewestReportedEventID returns the highest id of a runtime-reported
	// timeline row ("" when there is none).
	NewestReportedEventID(ctx context.Context) (string, error)
	// PruneReportedInstanceEvents deletes up to batch of an instance's
	// runtime-reported timeline rows, oldest first, that are not among its
	// newest keep; lifecycle rows (no dedupe key) are never touched. It
	// returns how many it deleted.
	PruneReportedInstanceEvents(ctx context.Context, instanceID string, keep, batch int) (int64, error)

	InsertInstanceMember(ctx context.Context, m InstanceMember) error
	SetInstanceMembersStatus(ctx context.Context, instanceID, workloadName string, status MemberStatus, containerIDs []byte, now time.Time) error
	ListInstanceMembers(ctx context.Context, instanceID string, p storage.Page) ([]InstanceMember, string, error)
	// UpdateInstanceMember writes one member's state, deployment and reason.
	UpdateInstanceMember(ctx context.Context, m InstanceMember) error
	GetInstanceMember(ctx context.Context, instanceID, id string) (InstanceMember, error)
	// AddedMembersOn lists added members not yet removed on a node (or,
	// with nodeID empty, on an allocation).
	AddedMembersOn(ctx context.Context, allocationID, nodeID string) ([]InstanceMember, error)
	// RunningMemberReports lists every running added member on a ready or
	// draining node, each with its node's stored workload report and its
	// instance's runtime backend, by node: checkMembers' one read.
	RunningMemberReports(ctx context.Context) ([]MemberReport, error)

	// Tenant-shared instances (attachments.go).
	InsertInstanceAttachment(ctx context.Context, a Attachment) error
	DeleteInstanceAttachment(ctx context.Context, instanceID, projectID string) error
	ListInstanceAttachments(ctx context.Context, instanceID string) ([]Attachment, error)
	InstanceAttached(ctx context.Context, instanceID, projectID string) (bool, error)

	InsertUIOpenCode(ctx context.Context, c UIOpenCode) error
	RedeemUIOpenCode(ctx context.Context, codeHash, instanceID string, at time.Time) (UIOpenCode, error)
	// UsableUIOpenCode returns a code RedeemUIOpenCode would redeem now,
	// without using it.
	UsableUIOpenCode(ctx context.Context, codeHash, instanceID string, at time.Time) (UIOpenCode, error)

	// Other domains' tables, read where a launch is resolved.

	// AppArtifactsOfVersion lists every artifact registered for an app
	// version in any project, revoked ones included.
	AppArtifactsOfVersion(ctx context.Context, appSlug, appVersion string) ([]artifacts.AppArtifact, error)
	// ShareAppArtifact reads an artifact and keeps its state from
	// changing until the transaction ends (a retire or revoke waits), so a
	// launch or deployment recorded with its digest cannot cross it.
	ShareAppArtifact(ctx context.Context, id string) (artifacts.AppArtifact, error)
	catalog.LaunchReader
	GetProject(ctx context.Context, id string) (iam.Project, error)
	GetUser(ctx context.Context, id string) (iam.User, error)
	iam.GrantReader
}

// Tx is a mutation as the instances domain sees it.
type Tx interface {
	storage.Tx
	Queries
}

// Store is the instances domain's storage.
type Store = storage.Store[Tx, Queries]
