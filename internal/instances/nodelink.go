package instances

import (
	"context"
	"encoding/json"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// NodesLink connects the instances domain to the nodes domain: it reads
// allocations with their node's inventory, queues tasks on the durable
// per-node queue inside the instance's transaction, reads task outcomes,
// and (Attach) subscribes the instance consequences of node lifecycle
// changes and wakes the driver when a task result lands.
type NodesLink struct{ Nodes *nodes.Service }

var (
	_ Allocations        = NodesLink{}
	_ TaskQueue          = NodesLink{}
	_ AllocationReleases = (*nodes.Service)(nil)
)

// queries reads the nodes domain's tables in tx, or outside any
// transaction when tx is nil.
func (l NodesLink) queries(tx storage.Tx) nodes.Queries {
	if tx == nil {
		return l.Nodes.Store.Read()
	}
	return l.Nodes.Store.Join(tx)
}

// Allocation implements Allocations.
func (l NodesLink) Allocation(ctx context.Context, tx storage.Tx, id string) (Allocation, error) {
	q := l.queries(tx)
	a, err := q.GetAllocation(ctx, id)
	if err != nil {
		return Allocation{}, err
	}
	return l.withNode(ctx, q, a)
}

// ProjectAllocations implements Allocations. It reads every page of the
// project's allocations: a launch may only fit one past the first page.
// Each node is read once however many of the allocations it holds.
func (l NodesLink) ProjectAllocations(ctx context.Context, tx storage.Tx, projectID string) ([]Allocation, error) {
	q := l.queries(tx)
	var out []Allocation
	nodesByID := map[string]nodes.Node{}
	p := storage.Page{Limit: storage.MaxPageLimit}
	for {
		as, next, err := q.ListAllocations(ctx, nodes.AllocationFilter{ProjectID: projectID}, p)
		if err != nil {
			return nil, err
		}
		for _, a := range as {
			if !a.Live() {
				continue
			}
			n, ok := nodesByID[a.NodeID]
			if !ok {
				if n, err = q.GetNode(ctx, a.NodeID); err != nil {
					return nil, err
				}
				nodesByID[a.NodeID] = n
			}
			out = append(out, joinNode(a, n))
		}
		if next == "" {
			return out, nil
		}
		p.Cursor = next
	}
}

func (l NodesLink) withNode(ctx context.Context, q nodes.Queries, a nodes.Allocation) (Allocation, error) {
	n, err := q.GetNode(ctx, a.NodeID)
	if err != nil {
		return Allocation{}, err
	}
	return joinNode(a, n), nil
}

// joinNode is a together with its node's state and inventory.
func joinNode(a nodes.Allocation, n nodes.Node) Allocation {
	out := Allocation{ID: a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID, NodeID: a.NodeID, Shape: a.Shape, State: a.State, GPUUUIDs: a.GPUUUIDs}
	out.NodeState = n.State
	_ = json.Unmarshal(n.Inventory, &out.Inventory)
	return out
}

// Enqueue implements TaskQueue. A nil tx queues the task in its own
// transaction.
func (l NodesLink) Enqueue(ctx context.Context, tx storage.Tx, nodeID, kind, instanceID, projectID string, payload any) (string, error) {
	t, err := l.Nodes.EnqueueTask(ctx, tx, nodeID, kind, payload, instanceID, projectID)
	return t.ID, err
}

// Outcome implements TaskQueue.
func (l NodesLink) Outcome(ctx context.Context, taskID string) (TaskOutcome, error) {
	t, err := l.Nodes.Store.Read().GetNodeTask(ctx, taskID)
	if err != nil {
		return TaskOutcome{}, err
	}
	if t.State != nodes.TaskSucceeded && t.State != nodes.TaskFailed {
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
	l.Nodes.OnTaskResult("", func(_ context.Context, tx storage.Tx, t nodes.Task, _ nodeapi.TaskResult) error {
		if t.InstanceID != "" {
			tx.AfterCommit(s.kick)
		}
		return nil
	})
}

// nodeHooks get the nodes domain's transaction, which they join.
type nodeHooks struct{ s *Service }

var (
	_ nodes.ReleaseHooks  = nodeHooks{}
	_ nodes.WorkloadHooks = nodeHooks{}
)

// WorkloadsReported fails the added members whose containers the node no
// longer reports running.
func (h nodeHooks) WorkloadsReported(ctx context.Context, nodeID string, ws []nodeapi.Workload) error {
	return h.s.WorkloadsReported(ctx, nodeID, ws)
}

func (h nodeHooks) NodeDown(ctx context.Context, tx storage.Tx, node nodes.Node, _ []nodes.Allocation) error {
	return h.s.failNode(ctx, h.s.Store.Join(tx), node.ID)
}

// AllocationReleasing decommissions the live instances on a released
// allocation; it stays releasing while any of them is not decommissioned.
func (h nodeHooks) AllocationReleasing(ctx context.Context, stx storage.Tx, a nodes.Allocation) (bool, error) {
	tx := h.s.Store.Join(stx)
	if err := h.s.AllocationReleased(ctx, tx, a.ID); err != nil {
		return false, err
	}
	if err := h.s.releaseMembers(ctx, tx, a.ID); err != nil {
		return false, err
	}
	left, err := tx.LiveInstancesOn(ctx, a.ID, "")
	if err != nil || len(left) > 0 {
		return len(left) > 0, err
	}
	members, err := tx.AddedMembersOn(ctx, a.ID, "")
	return len(members) > 0, err
}

func (h nodeHooks) NodeReady(ctx context.Context, tx storage.Tx, node nodes.Node, workloads []nodeapi.Workload) error {
	return h.s.recoverNode(ctx, h.s.Store.Join(tx), node.ID, workloads)
}

// ArtifactPulls mints node-bound pull intents with the artifacts domain.
type ArtifactPulls struct{ Artifacts *artifacts.Service }

// NodePull implements PullGrants.
func (p ArtifactPulls) NodePull(ctx context.Context, nodeID string, a artifacts.AppArtifact) (nodeapi.ImagePull, error) {
	it, err := p.Artifacts.CreateNodePullIntent(ctx, nodeID, a.ProjectID, a.ID)
	if err != nil {
		return nodeapi.ImagePull{}, err
	}
	return it.ImagePull(), nil
}
