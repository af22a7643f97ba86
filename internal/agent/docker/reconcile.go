package docker

import (
	"context"
	"fmt"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/moby/moby/client"
)

// composeProjectLabel names the Compose project a container, network or
// volume belongs to (compose.LabelProject; compose imports this package).
const composeProjectLabel = "com.docker.compose.project"

// Reconciler adopts the labelled containers this node knows and removes
// labelled orphans (this node's label, a task the agent has no record of)
// once they have been seen for longer than the grace period. It lists by the
// ownership label only, so a container without it is never touched. The
// networks and volumes of Compose projects that have no container left are
// orphans on the same terms (reapProjects).
type Reconciler struct {
	D     *Driver
	Grace time.Duration
	// Known reports whether a workload belongs to a task this agent ran.
	// For a project's network or volume it is asked with the labels that
	// resource carries (no container id).
	Known func(nodeapi.Workload) bool
	Now   func() time.Time

	mu        sync.Mutex
	firstSeen map[string]time.Time // by container id
	// projectSeen is when a project network ("network/<id>") or volume
	// ("volume/<name>") was first seen as an orphan.
	projectSeen map[string]time.Time
}

// Result is what one reconcile pass did.
type Result struct {
	Adopted []nodeapi.Workload
	Removed []nodeapi.Workload
	// The names of the Compose project networks and volumes removed as
	// orphans.
	RemovedNetworks []string
	RemovedVolumes  []string
}

// Run makes one pass. Running containers that are known are left as they are
// (adopted, never restarted). When the networks and volumes cannot be
// listed, the containers the pass removed are still reported beside the
// error.
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
	// After the containers: a project whose last containers this pass
	// removed starts its networks' and volumes' grace now.
	err = r.reapProjects(ctx, now(), &out)
	return out, err
}

// reapProjects removes the networks and volumes of Compose projects that
// are gone. compose.Up creates them before it starts the services and only
// compose.Down removes them, so an Up that failed half-way, or a project
// whose containers went as orphans, would leave them on the node for good:
// bridge networks use up the engine's subnets, volumes hold model caches.
//
// A network or volume is looked at only when it carries the managed label,
// this node's label and a project label. One that is managed but has no
// node label is never touched: every network and volume compose.Up made
// carries the node label (Driver.Labels), so it is none of those; it is
// the shared WorkloadNetwork, or a resource of an agent whose node this
// pass cannot tell, perhaps another agent's on this same engine.
//
// A project is an orphan when no container of it exists on the engine at
// all, whoever labelled it and whatever its state, and Known knows none of
// its networks and volumes. Its resources are removed once they have been
// orphans for the grace; a project that has a container again, or is
// known, starts over. Known covers an Up in flight: its network and
// volumes carry its task, whose record the agent writes before it runs the
// task. The grace covers the rest, as for containers: the clock starts when
// a pass first sees the orphan, so an Up the agent lost track of has the
// whole grace between creating its network and creating its first
// container (the pulls come before the network).
func (r *Reconciler) reapProjects(ctx context.Context, now time.Time, out *Result) error {
	if r.projectSeen == nil {
		r.projectSeen = map[string]time.Time{}
	}
	f := r.D.Managed(nodeapi.LabelNode+"="+r.D.cfg.NodeID, composeProjectLabel)
	nets, err := r.D.C.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return fmt.Errorf("list project networks: %w", err)
	}
	vols, err := r.D.C.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return fmt.Errorf("list project volumes: %w", err)
	}
	// Listed after the networks and volumes, so that an Up that creates
	// its first container in between keeps them.
	cs, err := r.D.C.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", composeProjectLabel)})
	if err != nil {
		return fmt.Errorf("list project containers: %w", err)
	}
	type resource struct {
		key, kind, ref string // ref: the network's id, the volume's name
		w              nodeapi.Workload
	}
	var rs []resource
	of := func(name string, l map[string]string) nodeapi.Workload {
		return nodeapi.Workload{Name: name, TaskID: l[nodeapi.LabelTask], InstanceID: l[nodeapi.LabelInstance], ComposeProject: l[composeProjectLabel]}
	}
	for _, n := range nets.Items {
		rs = append(rs, resource{key: "network/" + n.ID, kind: "network", ref: n.ID, w: of(n.Name, n.Labels)})
	}
	for _, v := range vols.Items {
		rs = append(rs, resource{key: "volume/" + v.Name, kind: "volume", ref: v.Name, w: of(v.Name, v.Labels)})
	}
	keep := map[string]bool{} // projects with a container, or known
	for _, c := range cs.Items {
		keep[c.Labels[composeProjectLabel]] = true
	}
	for _, x := range rs {
		// One known resource keeps the whole project: a later task of it
		// may find a network an earlier one made, labelled with that one.
		if r.Known != nil && r.Known(x.w) {
			keep[x.w.ComposeProject] = true
		}
	}
	seen := map[string]bool{}
	for _, x := range rs {
		seen[x.key] = true
		if x.w.ComposeProject == "" || keep[x.w.ComposeProject] {
			delete(r.projectSeen, x.key)
			continue
		}
		first, ok := r.projectSeen[x.key]
		if !ok {
			r.projectSeen[x.key] = now
			first = now
		}
		if now.Sub(first) < r.Grace {
			continue
		}
		if x.kind == "network" {
			_, err = r.D.C.NetworkRemove(ctx, x.ref, client.NetworkRemoveOptions{})
		} else {
			// Without force: a volume some container still mounts is
			// refused, and one whose driver fails stays listed.
			_, err = r.D.C.VolumeRemove(ctx, x.ref, client.VolumeRemoveOptions{})
		}
		if cerrdefs.IsNotFound(err) { // gone meanwhile (a Down)
			delete(r.projectSeen, x.key)
			continue
		}
		if err != nil {
			// In use (a container outside the project joined the network),
			// or the engine refused: the next pass tries again.
			r.D.cfg.Logger.WarnContext(ctx, "could not remove orphan compose "+x.kind, x.kind, x.w.Name, "compose_project", x.w.ComposeProject, "err", err)
			continue
		}
		r.D.cfg.Logger.InfoContext(ctx, "removed orphan compose "+x.kind, x.kind, x.w.Name, "compose_project", x.w.ComposeProject,
			"task_id", x.w.TaskID, "instance_id", x.w.InstanceID)
		delete(r.projectSeen, x.key)
		if x.kind == "network" {
			out.RemovedNetworks = append(out.RemovedNetworks, x.w.Name)
		} else {
			out.RemovedVolumes = append(out.RemovedVolumes, x.w.Name)
		}
	}
	for k := range r.projectSeen {
		if !seen[k] {
			delete(r.projectSeen, k)
		}
	}
	return nil
}
