package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Heartbeat records that a node is alive, what it is (when its inventory
// changed) and what runs on it. A joining or down node becomes ready (or
// draining, when a drain was requested); its lost allocations become
// active again, and allocations placed on it since its last beat
// (pending) become active: the node confirmed them. A plain beat is one UPDATE with no
// audit row; a state or inventory change is a mutation with its audit row
// and events.
func (s *Service) Heartbeat(ctx context.Context, nodeID string, hb nodeapi.Heartbeat) (nodeapi.HeartbeatResponse, error) {
	if err := self(ctx, nodeID); err != nil {
		return nodeapi.HeartbeatResponse{}, err
	}
	if err := s.takeRequest(nodeID, "heartbeat"); err != nil {
		return nodeapi.HeartbeatResponse{}, err
	}
	var fe []errdefs.FieldError
	if len(hb.Workloads) > maxWorkloads {
		fe = append(fe, errdefs.FieldError{Field: "/workloads", Code: "too_many", Message: fmt.Sprintf("at most %d workloads", maxWorkloads)})
	}
	if hb.Inventory != nil {
		fe = append(fe, checkInventory("/inventory", *hb.Inventory)...)
	}
	if fe != nil {
		return nodeapi.HeartbeatResponse{}, errdefs.Validation(fe)
	}
	if hb.Workloads == nil {
		hb.Workloads = []nodeapi.Workload{}
	}
	workloads, err := json.Marshal(hb.Workloads)
	if err != nil {
		return nodeapi.HeartbeatResponse{}, err
	}
	q := s.Store.Read()
	n, err := q.GetNode(ctx, nodeID)
	if err != nil {
		return nodeapi.HeartbeatResponse{}, err
	}
	var (
		inv    []byte
		digest string
	)
	if hb.Inventory != nil {
		if inv, digest, err = encodeInventory(*hb.Inventory); err != nil {
			return nodeapi.HeartbeatResponse{}, err
		}
		if digest == n.InventoryDigest {
			inv = nil
		}
	}
	revive := n.State == StateJoining || n.State == StateDown
	changed := !sameWorkloads(workloads, n.Workloads)
	now := s.Now()
	if !revive && inv == nil && n.PendingAllocations == 0 {
		if !changed {
			err = q.TouchNode(ctx, nodeID, now)
		} else if err = q.SetNodeWorkloads(ctx, nodeID, workloads, now); err == nil {
			s.workloadsReported(ctx, nodeID, hb.Workloads)
		}
		return s.beatResponse(n.State, n.InventoryDigest), err
	}
	state, stored := n.State, n.InventoryDigest
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		cur, err := tx.LockNode(ctx, nodeID)
		if err != nil {
			return err
		}
		if err := tx.SetNodeWorkloads(ctx, nodeID, workloads, now); err != nil {
			return err
		}
		action := "node.heartbeat"
		if inv != nil && digest != cur.InventoryDigest {
			cur.Inventory, cur.InventoryDigest = inv, digest
			summarize(&cur, *hb.Inventory)
			if err := tx.SetNodeInventory(ctx, cur, gpusOf(nodeID, *hb.Inventory), now); err != nil {
				return err
			}
			if err := tx.Emit(storage.Event{Type: EventInventoryChanged, Subject: nodeSubject(nodeID)},
				map[string]any{"node_id": nodeID, "inventory_digest": digest, "gpu_count": cur.GPUCount}); err != nil {
				return err
			}
			action = "node.inventory"
		}
		if cur.State == StateJoining || cur.State == StateDown {
			to, err := s.markAlive(ctx, tx, cur, hb.Workloads)
			if err != nil {
				return err
			}
			state, action = to, "node."+string(to)
		}
		after := map[string]any{"state": state, "inventory_digest": cur.InventoryDigest}
		if cur.PendingAllocations > 0 {
			// The node beats after placements on it: they are confirmed.
			confirmed, err := s.confirm(ctx, tx, nodeID, now)
			if err != nil {
				return err
			}
			if confirmed > 0 && action == "node.heartbeat" {
				action = "node.allocations_confirmed"
			}
			after["confirmed_allocations"] = confirmed
		}
		stored = cur.InventoryDigest
		return tx.Audit(storage.AuditEvent{Action: action, ResourceType: "node", ResourceID: nodeID},
			map[string]any{"state": cur.State}, after)
	})
	if err != nil {
		return nodeapi.HeartbeatResponse{}, err
	}
	if !revive && changed {
		// A beat that also changed the inventory or confirmed placements
		// changes the workload report like a plain one (a revived node's
		// hooks saw it as NodeReady).
		s.workloadsReported(ctx, nodeID, hb.Workloads)
	}
	return s.beatResponse(state, stored), nil
}

// sameWorkloads reports whether a beat's report (as Heartbeat encodes it)
// is the one stored. The store may hand back its own encoding of the same
// list (PostgreSQL's jsonb spaces and orders keys), so bytes that differ
// are compared once the stored list is encoded the same way.
func sameWorkloads(report, stored []byte) bool {
	if bytes.Equal(report, stored) {
		return true
	}
	var ws []nodeapi.Workload
	if json.Unmarshal(stored, &ws) != nil {
		return false
	}
	if ws == nil {
		ws = []nodeapi.Workload{}
	}
	again, err := json.Marshal(ws)
	return err == nil && bytes.Equal(report, again)
}

// workloadsReported tells the hooks that watch workloads what a node now
// reports, so they can act on a change at once. It runs after the report
// is stored, and only when the report changed: a replica that dies before
// it, or a hook that fails (logged, not the node's failure), leaves later
// beats with the same report on the plain path, which calls no hook. A
// hook therefore must not depend on seeing every change: the stored report
// is the truth to re-check (the instances domain compares its running
// members with it periodically).
func (s *Service) workloadsReported(ctx context.Context, nodeID string, ws []nodeapi.Workload) {
	for _, h := range s.lifecycleHooks() {
		if wh, ok := h.(WorkloadHooks); ok {
			if err := wh.WorkloadsReported(ctx, nodeID, ws); err != nil {
				s.Logger.WarnContext(ctx, "reacting to a node's workload report failed", "node_id", nodeID, "err", err)
			}
		}
	}
}

// markAlive moves a joining or down node back into service: ready, or
// draining when an admin drained it before or while it was down (it still
// takes no placements). Either way its lost allocations become active
// again (a new billing interval each) and the hooks learn what really runs
// on it. It returns the state the node is in now.
func (s *Service) markAlive(ctx context.Context, tx Tx, n Node, workloads []nodeapi.Workload) (NodeState, error) {
	now := s.Now()
	to, event := StateReady, EventNodeReady
	if n.DrainRequested {
		to, event = StateDraining, EventNodeDraining
	}
	if err := tx.SetNodeState(ctx, n.ID, to, time.Time{}, now); err != nil {
		return "", err
	}
	lost, err := tx.AllocationsOfNode(ctx, n.ID, AllocLost)
	if err != nil {
		return "", err
	}
	for _, a := range lost {
		if err := s.activate(ctx, tx, a, AllocLost, now); err != nil {
			return "", err
		}
	}
	if err := tx.Emit(storage.Event{Type: event, Subject: nodeSubject(n.ID)}, map[string]any{"node_id": n.ID, "previous_state": n.State,
		"state": to, "drain_requested": n.DrainRequested, "workloads": len(workloads), "recovered_allocations": len(lost)}); err != nil {
		return "", err
	}
	n.State = to
	for _, h := range s.lifecycleHooks() {
		if err := h.NodeReady(ctx, tx, n, workloads); err != nil {
			return "", err
		}
	}
	return to, nil
}

func (s *Service) beatResponse(state NodeState, digest string) nodeapi.HeartbeatResponse {
	return nodeapi.HeartbeatResponse{State: string(state), HeartbeatTTLS: int(s.HeartbeatTTL.Seconds()),
		HeartbeatInterval: int(s.HeartbeatInterval().Seconds()), InventoryDigest: digest}
}
