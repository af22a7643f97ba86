package nodes

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/wakeup"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// livenessBatch bounds how many nodes one liveness run marks down.
const livenessBatch = 200

// Liveness returns the worker that marks nodes down once their last beat
// is older than TTL + grace. It runs every grace/2 (at most every second),
// so a dead node is marked within TTL + grace + a fraction of grace.
//
// It judges nothing for TTL + grace after its first run: a silence counts
// only while the control plane could hear the node. After an outage of
// every replica (an upgrade that stops them, a restart of a single-process
// install) each node's last beat is as old as the outage, and its agent
// beats again within TTL/3 of the API being back; judging at once marked
// every node down and failed every instance at the first pass. A replica
// that restarts while others run loses nothing by waiting: they judge.
// The same holds after every Start, not just the first: a replica whose
// schema guard paused its jobs refused the agents' beats meanwhile, and
// judging them at once on resuming would mark every node down.
func (s *Service) Liveness(logger *slog.Logger) *worker.Periodic {
	every := min(max(s.HeartbeatGrace/2, 200*time.Millisecond), time.Second)
	var listening time.Time // of the first run since Start; runs never overlap
	return &worker.Periodic{Name: "node-liveness", Interval: every, Jitter: 0.1, Timeout: 30 * time.Second,
		OnStart: func() { listening = time.Time{} },
		Logger:  logger, Run: func(ctx context.Context) error {
			now := s.Now()
			if listening.IsZero() {
				listening = now
			}
			if now.Sub(listening) < s.HeartbeatTTL+s.HeartbeatGrace {
				return nil
			}
			_, err := s.CheckLiveness(ctx)
			return err
		}}
}

// CheckLiveness marks every ready or draining node whose last heartbeat is
// older than TTL + grace down, and returns how many it marked.
func (s *Service) CheckLiveness(ctx context.Context) (int, error) {
	ctx = principal.With(ctx, principal.SystemActor)
	cutoff := s.Now().Add(-(s.HeartbeatTTL + s.HeartbeatGrace))
	stale, err := s.Store.Read().StaleNodes(ctx, cutoff, livenessBatch, StateReady, StateDraining, StateJoining)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, node := range stale {
		marked, err := s.markDown(ctx, node.ID, cutoff)
		if err != nil {
			return n, err
		}
		if marked {
			n++
		}
	}
	return n, nil
}

// markDown marks one node down if, under its lock, it is still stale: a
// beat that arrived since the scan keeps it up. Its active allocations
// become lost (their billing intervals close) and the hooks run.
func (s *Service) markDown(ctx context.Context, nodeID string, cutoff time.Time) (bool, error) {
	marked := false
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		n, err := tx.LockNode(ctx, nodeID)
		if err != nil {
			return err
		}
		if !n.LastHeartbeatAt.Before(cutoff) || (n.State != StateReady && n.State != StateDraining && n.State != StateJoining) {
			return errNotStale
		}
		now := s.Now()
		if err := tx.SetNodeState(ctx, nodeID, StateDown, time.Time{}, now); err != nil {
			return err
		}
		active, err := tx.AllocationsOfNode(ctx, nodeID, AllocActive, AllocPending)
		if err != nil {
			return err
		}
		lost := make([]Allocation, 0, len(active))
		for _, a := range active {
			if err := tx.SetAllocationState(ctx, a.ID, a.State, AllocLost, now); err != nil {
				return err
			}
			if err := tx.CloseAllocationInterval(ctx, a.ID, now); err != nil {
				return err
			}
			a.State = AllocLost
			lost = append(lost, a)
			if err := tx.Emit(storage.Event{Type: EventAllocationLost, Subject: allocationSubject(a.ID), OrgID: a.OrgID, ProjectID: a.ProjectID},
				allocationData(a)); err != nil {
				return err
			}
		}
		if err := tx.Emit(storage.Event{Type: EventNodeDown, Subject: nodeSubject(nodeID)}, map[string]any{
			"node_id": nodeID, "previous_state": n.State, "last_heartbeat_at": n.LastHeartbeatAt, "lost_allocations": len(lost)}); err != nil {
			return err
		}
		prev := n.State
		n.State = StateDown
		for _, h := range s.lifecycleHooks() {
			if err := h.NodeDown(ctx, tx, n, lost); err != nil {
				return err
			}
		}
		marked = true
		return tx.Audit(storage.AuditEvent{Action: "node.down", ResourceType: "node", ResourceID: nodeID, Reason: "heartbeat_missed"},
			map[string]any{"state": prev}, map[string]any{"state": StateDown, "lost_allocations": len(lost)})
	})
	if errors.Is(err, errNotStale) {
		return false, nil
	}
	if err == nil {
		s.Logger.WarnContext(ctx, "node marked down: heartbeats missed", "node_id", nodeID)
	}
	return marked, err
}

var errNotStale = errors.New("node beat meanwhile")

// NodeView is a node with its GPUs, for admin reads.
type NodeView struct {
	Node
	GPUs []NodeGPU
}

// ListNodes lists nodes (nodes.read, platform scope).
func (s *Service) ListNodes(ctx context.Context, g *iam.Grants, state NodeState, p storage.Page) ([]Node, string, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermNodesRead, "node"); err != nil {
		return nil, "", err
	}
	return s.Store.Read().ListNodes(ctx, state, p)
}

// GetNode reads one node with its GPUs (nodes.read, platform scope).
func (s *Service) GetNode(ctx context.Context, g *iam.Grants, id string) (NodeView, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermNodesRead, "node"); err != nil {
		return NodeView{}, err
	}
	return s.Node(ctx, id)
}

// Node reads one node with its GPUs, for other domains (no policy).
func (s *Service) Node(ctx context.Context, id string) (NodeView, error) {
	if _, err := uuid.Parse(id); err != nil {
		return NodeView{}, errNodeNotFound(id)
	}
	q := s.Store.Read()
	n, err := q.GetNode(ctx, id)
	if errors.Is(err, storage.ErrNotFound) {
		return NodeView{}, errNodeNotFound(id)
	}
	if err != nil {
		return NodeView{}, err
	}
	gpus, err := q.NodeGPUs(ctx, id)
	return NodeView{Node: n, GPUs: gpus}, err
}

// Drain stops placements on a node; what runs there keeps running. The
// request is kept apart from the node's liveness: a down node stays down
// until it beats and then comes back draining, and a draining node that
// goes down comes back draining too.
func (s *Service) Drain(ctx context.Context, g *iam.Grants, id string) (NodeView, error) {
	return s.setState(ctx, g, id, StateDraining, EventNodeDraining, "node.drain")
}

// Remove retires a node: its tokens stop working at once and it gets no
// placements. Its live allocations must be released first.
func (s *Service) Remove(ctx context.Context, g *iam.Grants, id string) (NodeView, error) {
	return s.setState(ctx, g, id, StateRemoved, EventNodeRemoved, "node.remove")
}

func (s *Service) setState(ctx context.Context, g *iam.Grants, id string, state NodeState, event, action string) (NodeView, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermNodesWrite, "node"); err != nil {
		return NodeView{}, err
	}
	if _, err := s.Node(ctx, id); err != nil {
		return NodeView{}, err
	}
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		n, err := tx.LockNode(ctx, id)
		if err != nil {
			return err
		}
		if n.State == StateRemoved {
			return errdefs.FailedPrecondition("node_removed", "node %s is removed; join the host again to use it", id)
		}
		now := s.Now()
		cut := time.Time{}
		if state == StateRemoved {
			if n.LiveAllocations > 0 {
				return errdefs.FailedPrecondition("node_has_allocations", "node %s still holds %d live allocations; release them first", id, n.LiveAllocations)
			}
			cut = now
		}
		to := state
		if state == StateDraining {
			if err := tx.RequestNodeDrain(ctx, id, now); err != nil {
				return err
			}
			if n.State == StateDown {
				to = StateDown // still silent: its next beat brings it back draining
			}
		}
		if to != n.State || !cut.IsZero() {
			if err := tx.SetNodeState(ctx, id, to, cut, now); err != nil {
				return err
			}
		}
		if !cut.IsZero() {
			// Every replica forgets what it knew of this node's tokens.
			tx.AfterCommit(func() { s.Wake.Notify(wakeup.NodeAccess) })
		}
		if err := tx.Emit(storage.Event{Type: event, Subject: nodeSubject(id)}, map[string]any{"node_id": id, "previous_state": n.State, "state": to}); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: action, ResourceType: "node", ResourceID: id},
			map[string]any{"state": n.State, "drain_requested": n.DrainRequested},
			map[string]any{"state": to, "drain_requested": n.DrainRequested || state == StateDraining})
	})
	if err != nil {
		return NodeView{}, err
	}
	return s.Node(ctx, id)
}
