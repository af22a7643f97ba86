package docker

import (
	"context"
	"sync"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/moby/moby/client"
)

// Reconciler adopts the labelled containers this node knows and removes
// labelled orphans (this node's label, a task the agent has no record of)
// once they have been seen for longer than the grace period. It lists by the
// ownership label only, so a container without it is never touched.
type Reconciler struct {
	D     *Driver
	Grace time.Duration
	// Known reports whether a workload belongs to a task this agent ran.
	Known func(nodeapi.Workload) bool
	Now   func() time.Time

	mu        sync.Mutex
	firstSeen map[string]time.Time
}

// Result is what one reconcile pass did.
type Result struct {
	Adopted []nodeapi.Workload
	Removed []nodeapi.Workload
}

// Run makes one pass. Running containers that are known are left as they are
// (adopted, never restarted).
func (r *Reconciler) Run(ctx context.Context) (Result, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstSeen == nil {
		r.firstSeen = map[string]time.Time{}
	}
	res, err := r.D.C.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: r.D.Managed(nodeapi.LabelNode + "=" + r.D.cfg.NodeID)})
	if err != nil {
		return Result{}, err
	}
	var out Result
	seen := map[string]bool{}
	for _, c := range res.Items {
		seen[c.ID] = true
		w := nodeapi.Workload{ContainerID: c.ID, InstanceID: c.Labels[nodeapi.LabelInstance], TaskID: c.Labels[nodeapi.LabelTask],
			ComposeProject: c.Labels["com.docker.compose.project"], State: string(c.State)}
		if len(c.Names) > 0 {
			w.Name = c.Names[0][1:]
		}
		if r.Known != nil && r.Known(w) {
			delete(r.firstSeen, c.ID)
			out.Adopted = append(out.Adopted, w)
			continue
		}
		first, ok := r.firstSeen[c.ID]
		if !ok {
			r.firstSeen[c.ID] = now()
			first = now()
		}
		if now().Sub(first) < r.Grace {
			continue
		}
		if _, err := r.D.C.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			r.D.cfg.Logger.WarnContext(ctx, "could not remove orphan container", "container_id", c.ID, "err", err)
			continue
		}
		r.D.cfg.Logger.InfoContext(ctx, "removed orphan gpuaas container", "container_id", c.ID, "task_id", w.TaskID, "instance_id", w.InstanceID)
		delete(r.firstSeen, c.ID)
		out.Removed = append(out.Removed, w)
	}
	for id := range r.firstSeen {
		if !seen[id] {
			delete(r.firstSeen, id)
		}
	}
	return out, nil
}
