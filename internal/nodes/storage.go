package nodes

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// NodeState is where a node is in its life.
type NodeState string

// Node states.
const (
	StateJoining  NodeState = "joining"
	StateReady    NodeState = "ready"
	StateDown     NodeState = "down"
	StateDraining NodeState = "draining"
	StateRemoved  NodeState = "removed"
)

// AllocationState is where an allocation is in its life.
type AllocationState string

// Allocation states.
const (
	AllocPending   AllocationState = "pending"
	AllocActive    AllocationState = "active"
	AllocReleasing AllocationState = "releasing"
	AllocReleased  AllocationState = "released"
	AllocLost      AllocationState = "lost"
)

// TaskState is where a task of a node's queue is.
type TaskState string

// Task states.
const (
	TaskQueued    TaskState = "queued"
	TaskLeased    TaskState = "leased"
	TaskSucceeded TaskState = "succeeded"
	TaskFailed    TaskState = "failed"
)

// NodeJoinToken is a single-use bootstrap token (its hash only).
type NodeJoinToken struct {
	ID          string
	TokenHash   string
	Description string
	CreatedBy   string
	CreatedAt   time.Time
	ExpiresAt   time.Time
	UsedAt      time.Time // zero: unused
	NodeID      string
}

// Node is a GPU host running the agent.
type Node struct {
	ID                    string
	Name                  string
	State                 NodeState
	KeyID                 string
	PublicKey             string
	Inventory             []byte // JSON nodeapi.Inventory
	InventoryDigest       string
	Workloads             []byte // JSON []nodeapi.Workload
	GPUCount              int
	FreeGPUs              int
	GPUModel              string
	GPUVendor             string
	GPUMemoryMiB          int64
	LiveAllocations       int
	ExclusiveAllocationID string
	// PendingAllocations counts placements since the node last confirmed
	// its allocations (a heartbeat); 0 keeps a plain beat one UPDATE.
	PendingAllocations int
	// DrainRequested records an admin's drain apart from the liveness
	// state: a drained node that goes down (or a down node drained) comes
	// back draining, not ready, and placement never picks it.
	DrainRequested   bool
	TokensValidAfter time.Time
	LastHeartbeatAt  time.Time
	StateChangedAt   time.Time
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// NodeGPU is one accelerator of a node, as its latest inventory reports it.
type NodeGPU struct {
	NodeID    string
	UUID      string
	Index     int
	Model     string
	Vendor    string
	MemoryMiB int64
}

// PlacementQuery narrows where an allocation may go.
type PlacementQuery struct {
	GPUs         int
	Baremetal    bool
	NodeID       string
	Model        string
	Vendor       string
	MinMemoryMiB int64
}

// Claim is what ClaimPlacement took: a node and the GPUs picked on it.
type Claim struct {
	NodeID string
	// GPUCount is how many GPUs the node has.
	GPUCount int
	// Free are the node's GPUs no live allocation held when the claim read
	// them, matching the request, in index order: at most c.GPUs of them
	// for a slice, all of them for baremetal.
	Free []string
}

// NodeTask is one task in a node's durable queue. Payload is sealed by the
// nodes domain before it gets here.
type NodeTask struct {
	ID             string
	NodeID         string
	Kind           string
	InstanceID     string
	ProjectID      string
	Payload        string
	State          TaskState
	Attempt        int
	LeaseExpiresAt time.Time
	ReasonCode     string
	Message        string
	Result         []byte // JSON nodeapi.TaskResult
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CompletedAt    time.Time
}

// NodeTaskFilter narrows a task list; empty fields match all.
type NodeTaskFilter struct {
	NodeID     string
	InstanceID string
	State      TaskState
}

// Allocation is a project's hold on GPUs of one node (gpu_slice) or on a
// whole node (baremetal).
type Allocation struct {
	ID         string
	OrgID      string
	ProjectID  string
	NodeID     string
	Shape      string // gpu_slice | baremetal
	SKU        string
	GPUCount   int
	GPUUUIDs   []string
	State      AllocationState
	CreatedBy  string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	ReleasedAt time.Time
}

// Live reports whether the allocation still holds its GPUs.
func (a Allocation) Live() bool { return a.State != AllocReleased }

// AllocationFilter narrows an allocation list; empty fields match all.
type AllocationFilter struct {
	ProjectID string
	NodeID    string
	State     AllocationState
}

// AllocationInterval is a span during which an allocation was active.
type AllocationInterval struct {
	ID           string
	AllocationID string
	OrgID        string
	ProjectID    string
	NodeID       string
	SKU          string
	GPUCount     int
	StartedAt    time.Time
	EndedAt      time.Time // zero: still open
}

// Queries is what the nodes domain reads and writes.
type Queries interface {
	// Dialect says which engine runs the queries: a placement waits on
	// nodes locked by concurrent placements only where row locks exist.
	Dialect() storage.Dialect

	InsertNodeJoinToken(ctx context.Context, t NodeJoinToken) error
	GetNodeJoinTokenByHash(ctx context.Context, hash string) (NodeJoinToken, error)
	UseNodeJoinToken(ctx context.Context, id, nodeID string, at time.Time) error

	InsertNode(ctx context.Context, n Node) error
	GetNode(ctx context.Context, id string) (Node, error)
	LockNode(ctx context.Context, id string) (Node, error)
	ListNodes(ctx context.Context, state NodeState, p storage.Page) ([]Node, string, error)
	// StaleNodes and AllocationsOfNode return rows in one of states;
	// with no state given, none.
	StaleNodes(ctx context.Context, cutoff time.Time, limit int, states ...NodeState) ([]Node, error)
	NodeAuth(ctx context.Context, id string) (state NodeState, validAfter time.Time, err error)
	TouchNode(ctx context.Context, id string, at time.Time) error
	ClearNodePending(ctx context.Context, id string) error
	SetNodeWorkloads(ctx context.Context, id string, workloads []byte, at time.Time) error
	SetNodeState(ctx context.Context, id string, state NodeState, validAfter, at time.Time) error
	RequestNodeDrain(ctx context.Context, id string, at time.Time) error
	SetNodeInventory(ctx context.Context, n Node, gpus []NodeGPU, at time.Time) error
	NodeGPUs(ctx context.Context, nodeID string) ([]NodeGPU, error)
	UseNodeAssertionID(ctx context.Context, nodeID, jti string, expiresAt time.Time) error
	PurgeExpiredNodeAssertionIDs(ctx context.Context, now time.Time) error

	ClaimPlacement(ctx context.Context, c PlacementQuery, exclusiveAllocationID string, at time.Time, skipLocked bool) (Claim, error)
	PlacementPossible(ctx context.Context, c PlacementQuery) (bool, error)
	ReturnNodeCapacity(ctx context.Context, nodeID, allocationID string, at time.Time) error

	InsertAllocation(ctx context.Context, a Allocation) error
	GetAllocation(ctx context.Context, id string) (Allocation, error)
	ListAllocations(ctx context.Context, f AllocationFilter, p storage.Page) ([]Allocation, string, error)
	AllocationsOfNode(ctx context.Context, nodeID string, states ...AllocationState) ([]Allocation, error)
	SetAllocationState(ctx context.Context, id string, from, to AllocationState, at time.Time) error
	FreeAllocationGPUs(ctx context.Context, allocationID string) error
	OpenAllocationInterval(ctx context.Context, i AllocationInterval) error
	CloseAllocationInterval(ctx context.Context, allocationID string, at time.Time) error

	InsertNodeTask(ctx context.Context, t NodeTask) error
	GetNodeTask(ctx context.Context, id string) (NodeTask, error)
	DeliverableNodeTasks(ctx context.Context, nodeID string, now time.Time, limit int) ([]NodeTask, error)
	LeaseNodeTask(ctx context.Context, id string, now, expires time.Time) error
	CompleteNodeTask(ctx context.Context, id string, state TaskState, reason, message string, result []byte, at time.Time) error
	ListNodeTasks(ctx context.Context, f NodeTaskFilter, p storage.Page) ([]NodeTask, string, error)

	// GetProject reads the project an allocation is placed for when the
	// control plane itself places it (no caller grants to check).
	GetProject(ctx context.Context, id string) (iam.Project, error)
}

// Tx is a mutation as the nodes domain sees it.
type Tx interface {
	storage.Tx
	Queries
}

// Store is the nodes domain's storage.
type Store = storage.Store[Tx, Queries]
