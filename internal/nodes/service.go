// Package nodes is the control plane's side of GPU hosts: single-use join
// tokens, node identities with node-signed token exchange, inventory and
// heartbeats, liveness (down within TTL + grace), GPU allocations placed
// transactionally, and the durable per-node task queue the agent long-polls.
//
// A node authenticates as principal type "node". It holds no role: the only
// thing it may do is call its own node endpoints, which every method here
// checks by comparing the principal with the node named in the path.
package nodes

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/ratelimit"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/wakeup"
)

// Allocation shapes (the states are in storage.go).
const (
	ShapeGPUSlice  = "gpu_slice"
	ShapeBaremetal = "baremetal"
)

// Event types this domain emits (CloudEvents type, dot-named).
const (
	EventNodeJoined          = "nodes.node.joined"
	EventNodeReady           = "nodes.node.ready"
	EventNodeDown            = "nodes.node.down"
	EventNodeDraining        = "nodes.node.draining"
	EventNodeRemoved         = "nodes.node.removed"
	EventInventoryChanged    = "nodes.node.inventory_changed"
	EventAllocationPending   = "nodes.allocation.pending"
	EventAllocationActive    = "nodes.allocation.active"
	EventAllocationReleasing = "nodes.allocation.releasing"
	EventAllocationReleased  = "nodes.allocation.released"
	EventAllocationLost      = "nodes.allocation.lost"
	EventTaskCompleted       = "nodes.task.completed"
)

// Defaults of the domain.
const (
	DefaultHeartbeatTTL   = 10 * time.Second
	DefaultHeartbeatGrace = 5 * time.Second
	DefaultJoinTokenTTL   = 15 * time.Minute
	MaxJoinTokenTTL       = 24 * time.Hour
	DefaultTaskLease      = 2 * time.Minute
	MaxWait               = 60 * time.Second
	// MaxAssertionLifetime caps exp - iat of a node assertion.
	MaxAssertionLifetime = time.Hour
	// ClockSkew is the tolerance on iat and exp of node assertions.
	ClockSkew = 60 * time.Second
	// DefaultSlowPoll bounds how long a long poll waits without a wake-up
	// before it looks again. Wake-ups reach every replica (Deps.Wake linked
	// to NATS), so the slow look only covers a lost hint or a lease that
	// ran out on another replica: an idle agent polling with MaxWait costs
	// one look per poll, one database query a minute.
	DefaultSlowPoll = MaxWait
)

// Hooks are the consequences other domains attach to node lifecycle
// changes; each runs inside the transaction that makes the change, so the
// change and its consequences commit together. The app-instance domain
// uses them to mark instances on a dead node.
type Hooks interface {
	// NodeDown runs when a node is marked down; lost lists the allocations
	// that were active on it and are now lost.
	NodeDown(ctx context.Context, tx storage.Tx, node Node, lost []Allocation) error
	// NodeReady runs when a node is back in service (or in it for the
	// first time) with what it reports running: ready, or draining when an
	// admin drained it before it came back (node.State says which).
	NodeReady(ctx context.Context, tx storage.Tx, node Node, workloads []nodeapi.Workload) error
}

// ReleaseHooks is what a Hooks value may also implement to learn of an
// allocation's release: AllocationReleasing starts tearing down what runs
// on the allocation (in the releasing transaction) and reports whether
// anything is still to tear down. While something is, the allocation stays
// `releasing` and keeps its GPUs; the domain calls
// Service.AllocationTornDown once its teardown is done.
type ReleaseHooks interface {
	AllocationReleasing(ctx context.Context, tx storage.Tx, a Allocation) (busy bool, err error)
}

// WorkloadHooks is what a Hooks value may also implement to learn what a
// node reports running whenever the report changes (a container exited,
// one is gone). It runs after the report is stored, outside any
// transaction: each consequence is the hook's own mutation.
type WorkloadHooks interface {
	WorkloadsReported(ctx context.Context, nodeID string, workloads []nodeapi.Workload) error
}

// ResultHandler learns how a task ended, inside the transaction that
// records the result.
type ResultHandler func(ctx context.Context, tx storage.Tx, task Task, result nodeapi.TaskResult) error

// Deps are what the service needs.
type Deps struct {
	Store  Store
	IAM    *iam.Service
	Tokens *iam.Tokens
	Sealer *sealer.Sealer
	Logger *slog.Logger
	Now    func() time.Time
	// LaunchGate is billing's quota and budget check (issue 13,
	// launchgate.go); nil checks nothing.
	LaunchGate LaunchGate
	// TokenURL is the audience of node assertions:
	// <public-url>/api/v1/nodes/token.
	TokenURL       func() string
	HeartbeatTTL   time.Duration
	HeartbeatGrace time.Duration
	TaskLease      time.Duration
	// Wake carries "tasks queued for node N" to the long polls of every
	// replica (nil: this process only).
	Wake *wakeup.Hub
	// SlowPoll is the fallback look period of a waiting long poll
	// (default DefaultSlowPoll).
	SlowPoll time.Duration
	// RequestRate and RequestBurst limit the requests one node may make
	// to each of its endpoints on this replica (requestlimit.go); a rate
	// of 0 takes every request.
	RequestRate  float64
	RequestBurst int
}

// Service is the nodes domain.
type Service struct {
	Deps
	hooksMu  sync.RWMutex
	hooks    []Hooks
	handlers map[string][]ResultHandler
	// leases: when the earliest task lease this replica granted per node
	// runs out, so that node's poll looks again then (redelivery) without
	// looking every second in between.
	leaseMu sync.Mutex
	leases  map[string][]time.Time
	// authCache: node id -> nodeAuth (auth.go); authGen counts forgets.
	authCache sync.Map
	authGen   atomic.Int64
	// closing ends every long poll at once when the server shuts down.
	closing   chan struct{}
	closeOnce sync.Once
	// lastPurge is when used assertion ids were last purged (unix nanos).
	lastPurge atomic.Int64
	// requestLimit is each node's budget per endpoint (nil: no limit).
	requestLimit *ratelimit.Keyed
}

// New builds the service.
func New(d Deps) *Service {
	d.Now = clock.Or(d.Now)
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.TokenURL == nil {
		d.TokenURL = func() string { return "" }
	}
	if d.HeartbeatTTL <= 0 {
		d.HeartbeatTTL = DefaultHeartbeatTTL
	}
	d.HeartbeatGrace = max(d.HeartbeatGrace, 0) // zero is no grace: the server passes its configured value
	if d.TaskLease <= 0 {
		d.TaskLease = DefaultTaskLease
	}
	if d.Wake == nil {
		d.Wake = wakeup.New()
	}
	if d.SlowPoll <= 0 {
		d.SlowPoll = DefaultSlowPoll
	}
	s := &Service{Deps: d, handlers: map[string][]ResultHandler{}, leases: map[string][]time.Time{}, closing: make(chan struct{}),
		requestLimit: ratelimit.New(d.RequestRate, d.RequestBurst, maxLimitedNodeEndpoints)}
	d.Wake.OnNotify(wakeup.NodeAccess, s.forgetNodeAuth)
	return s
}

// EndPolls answers every waiting long poll now (with what is there) and
// makes later ones return at once: the server calls it before draining its
// connections, so a shutdown never waits out wait_seconds.
func (s *Service) EndPolls() { s.closeOnce.Do(func() { close(s.closing) }) }

// AddHooks registers lifecycle consequences.
func (s *Service) AddHooks(h Hooks) {
	s.hooksMu.Lock()
	defer s.hooksMu.Unlock()
	s.hooks = append(s.hooks, h)
}

// OnTaskResult registers a handler for results of tasks of kind ("" for
// every kind).
func (s *Service) OnTaskResult(kind string, h ResultHandler) {
	s.hooksMu.Lock()
	defer s.hooksMu.Unlock()
	s.handlers[kind] = append(s.handlers[kind], h)
}

func (s *Service) lifecycleHooks() []Hooks {
	s.hooksMu.RLock()
	defer s.hooksMu.RUnlock()
	return append([]Hooks(nil), s.hooks...)
}

func (s *Service) resultHandlers(kind string) []ResultHandler {
	s.hooksMu.RLock()
	defer s.hooksMu.RUnlock()
	return append(append([]ResultHandler(nil), s.handlers[kind]...), s.handlers[""]...)
}

// HeartbeatInterval is how often agents beat: a third of the TTL, so two
// lost beats still leave the node alive.
func (s *Service) HeartbeatInterval() time.Duration {
	return max(s.HeartbeatTTL/3, time.Second)
}

var _ iam.NodeChecker = (*Service)(nil)

func nodeSubject(id string) string       { return "nodes/" + id }
func allocationSubject(id string) string { return "allocations/" + id }
