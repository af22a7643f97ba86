package instances

import (
	"context"
	"encoding/json"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/nodeapi"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
)

// NodesLink connects the instances domain to the nodes domain: it reads
// allocations with their node's inventory, queues tasks on the durable
// per-node queue inside the instance's transaction, reads task outcomes,
// and (Attach) subscribes the instance consequences of node lifecycle
// changes and wakes the driver when a task result lands.
type NodesLink struct{ Nodes *nodes.Service }

var (
	_ Allocations = NodesLink{}
	_ TaskQueue   = NodesLink{}
)

// Allocation implements Allocations.
func (l NodesLink) Allocation(ctx context.Context, q *store.Queries, id string) (Allocation, error) {
	a, err := q.GetAllocation(ctx, id)
	if err != nil {
		return Allocation{}, err
	}
	return l.withNode(ctx, q, a)
}

// ProjectAllocations implements Allocations.
func (l NodesLink) ProjectAllocations(ctx context.Context, q *store.Queries, projectID string) ([]Allocation, error) {
	as, _, err := q.ListAllocations(ctx, store.AllocationFilter{ProjectID: projectID}, store.Page{Limit: store.MaxPageLimit})
	if err != nil {
		return nil, err
	}
	var out []Allocation
	for _, a := range as {
		if !a.Live() {
			continue
		}
		x, err := l.withNode(ctx, q, a)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

func (l NodesLink) withNode(ctx context.Context, q *store.Queries, a store.Allocation) (Allocation, error) {
	out := Allocation{ID: a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID, NodeID: a.NodeID, Shape: a.Shape, State: string(a.State), GPUUUIDs: a.GPUUUIDs}
	n, err := q.GetNode(ctx, a.NodeID)
	if err != nil {
		return Allocation{}, err
	}
	out.NodeState = string(n.State)
	_ = json.Unmarshal(n.Inventory, &out.Inventory)
	return out, nil
}

// Enqueue implements TaskQueue.
func (l NodesLink) Enqueue(ctx context.Context, tx *store.Tx, nodeID, kind, instanceID, projectID string, payload any) (string, error) {
	var join storage.Tx // a nil tx stays nil: the task is then queued in its own transaction
	if tx != nil {
		join = tx
	}
	t, err := l.Nodes.EnqueueTask(ctx, join, nodeID, kind, payload, instanceID, projectID)
	return t.ID, err
}

// Outcome implements TaskQueue.
func (l NodesLink) Outcome(ctx context.Context, q *store.Queries, taskID string) (TaskOutcome, error) {
	t, err := q.GetNodeTask(ctx, taskID)
	if err != nil {
		return TaskOutcome{}, err
	}
	if t.State != nodeapi.ResultSucceeded && t.State != nodeapi.ResultFailed {
		return TaskOutcome{}, nil
	}
	var r nodeapi.TaskResult
	if len(t.Result) > 0 {
		_ = json.Unmarshal(t.Result, &r)
	}
	r.State = string(t.State)
	if r.ReasonCode == "" {
		r.ReasonCode = t.ReasonCode
	}
	return TaskOutcome{Done: true, Result: r}, nil
}

// Attach makes s react to the nodes domain: node down and back, and task
// results (which wake the driver once they are committed).
func (l NodesLink) Attach(s *Service) {
	l.Nodes.AddHooks(nodeHooks{s})
	s.releases = releases{l.Nodes}
	l.Nodes.OnTaskResult("", func(_ context.Context, tx storage.Tx, t nodes.Task, _ nodeapi.TaskResult) error {
		if t.InstanceID != "" {
			tx.AfterCommit(s.kick)
		}
		return nil
	})
}

// releases hands the nodes domain the instance's transaction.
type releases struct{ nodes *nodes.Service }

func (r releases) AllocationTornDown(ctx context.Context, tx *store.Tx, allocationID string) error {
	return r.nodes.AllocationTornDown(ctx, tx, allocationID)
}

// nodeHooks get the nodes domain's transaction, which is this package's
// *store.Tx.
type nodeHooks struct{ s *Service }

var _ nodes.ReleaseHooks = nodeHooks{}

func (h nodeHooks) NodeDown(ctx context.Context, tx storage.Tx, node nodes.Node, _ []nodes.Allocation) error {
	return h.s.failNode(ctx, tx.(*store.Tx), node.ID)
}

// AllocationReleasing decommissions the live instances on a released
// allocation; it stays releasing while any of them is not decommissioned.
func (h nodeHooks) AllocationReleasing(ctx context.Context, stx storage.Tx, a nodes.Allocation) (bool, error) {
	tx := stx.(*store.Tx)
	if err := h.s.AllocationReleased(ctx, tx, a.ID); err != nil {
		return false, err
	}
	left, err := tx.LiveInstancesOn(ctx, a.ID, "")
	return len(left) > 0, err
}

func (h nodeHooks) NodeReady(ctx context.Context, tx storage.Tx, node nodes.Node, workloads []nodeapi.Workload) error {
	return h.s.recoverNode(ctx, tx.(*store.Tx), node.ID, workloads)
}

// ArtifactPulls mints node-bound pull intents with the artifacts domain.
type ArtifactPulls struct{ Artifacts *artifacts.Service }

// NodePull implements PullGrants.
func (p ArtifactPulls) NodePull(ctx context.Context, nodeID string, a store.AppArtifact) (nodeapi.ImagePull, error) {
	it, err := p.Artifacts.CreateNodePullIntent(ctx, nodeID, a.ProjectID, a.ID)
	if err != nil {
		return nodeapi.ImagePull{}, err
	}
	return it.ImagePull(), nil
}
