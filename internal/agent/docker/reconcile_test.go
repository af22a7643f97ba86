package docker_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/agent/docker"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

const labelComposeProject = "com.docker.compose.project"

// projectDriver is a driver for a node of its own, so that no other test's
// reconcile pass sees what this test makes, and the Docker CLI of the test.
func projectDriver(t *testing.T) (*docker.Driver, agenttest.Docker) {
	dk := agenttest.RequireDocker(t)
	d, err := docker.New(docker.Config{NodeID: "test-node-" + uuid.NewString()[:8], DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, dk
}

// projectNetwork makes the network compose.Up makes for project, with
// labels plus the project label, and removes it when the test ends.
func projectNetwork(t *testing.T, d *docker.Driver, project string, labels map[string]string) string {
	t.Helper()
	name := project + "_default"
	l := maps.Clone(labels)
	l[labelComposeProject] = project
	l["com.docker.compose.network"] = "default"
	if _, err := d.C.NetworkCreate(context.Background(), name, client.NetworkCreateOptions{Driver: "bridge", Labels: l}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.C.NetworkRemove(context.Background(), name, client.NetworkRemoveOptions{}) })
	return name
}

// projectVolume makes the named volume vol of project, as compose.Up does.
func projectVolume(t *testing.T, d *docker.Driver, project, vol string, labels map[string]string) string {
	t.Helper()
	name := project + "_" + vol
	l := maps.Clone(labels)
	l[labelComposeProject] = project
	l["com.docker.compose.volume"] = vol
	if _, err := d.C.VolumeCreate(context.Background(), client.VolumeCreateOptions{Name: name, Labels: l}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.C.VolumeRemove(context.Background(), name, client.VolumeRemoveOptions{Force: true}) })
	return name
}

// exist fails the test unless the networks and volumes named exist (want)
// or are all gone (!want).
func exist(t *testing.T, d *docker.Driver, want bool, networks, volumes []string) {
	t.Helper()
	ctx := context.Background()
	check := func(kind, name string, err error) {
		t.Helper()
		switch {
		case err != nil && !cerrdefs.IsNotFound(err):
			t.Fatalf("inspect %s %s: %v", kind, name, err)
		case want && err != nil:
			t.Fatalf("%s %s was removed", kind, name)
		case !want && err == nil:
			t.Fatalf("%s %s still exists", kind, name)
		}
	}
	for _, n := range networks {
		_, err := d.C.NetworkInspect(ctx, n, client.NetworkInspectOptions{})
		check("network", n, err)
	}
	for _, v := range volumes {
		_, err := d.C.VolumeInspect(ctx, v, client.VolumeInspectOptions{})
		check("volume", v, err)
	}
}

// pass runs one reconcile pass and fails the test unless it removed
// exactly the networks and volumes named.
func pass(t *testing.T, r *docker.Reconciler, networks, volumes []string) {
	t.Helper()
	res, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.RemovedNetworks)
	slices.Sort(res.RemovedVolumes)
	if !slices.Equal(res.RemovedNetworks, slices.Sorted(slices.Values(networks))) || !slices.Equal(res.RemovedVolumes, slices.Sorted(slices.Values(volumes))) {
		t.Fatalf("removed networks %v and volumes %v, want %v and %v", res.RemovedNetworks, res.RemovedVolumes, networks, volumes)
	}
}

// The network and volumes a Compose project left on this node (an up that
// failed half-way: no container, a task the agent no longer knows) are
// removed once they have been seen for longer than the grace, not before,
// and reported.
func TestReconcileRemovesOrphanProjectNetworksAndVolumes(t *testing.T) {
	d, _ := projectDriver(t)
	sfx := uuid.NewString()[:8]
	project := "gpuaas-orphan-" + sfx
	labels := d.Labels(docker.Owner{TaskID: "gone-" + sfx, InstanceID: "inst" + sfx}, nil)
	nets := []string{projectNetwork(t, d, project, labels)}
	vols := []string{projectVolume(t, d, project, "data", labels), projectVolume(t, d, project, "cache", labels)}
	now := time.Now()
	r := &docker.Reconciler{D: d, Grace: time.Minute, Now: func() time.Time { return now },
		Known: func(nodeapi.Workload) bool { return false }}
	pass(t, r, nil, nil)
	now = now.Add(59 * time.Second)
	pass(t, r, nil, nil)
	exist(t, d, true, nets, vols)
	now = now.Add(2 * time.Second)
	pass(t, r, nets, vols)
	exist(t, d, false, nets, vols)
}

// A project whose task the agent knows keeps its network and volumes, all
// of them when one is known (a later task of the project found a network
// an earlier one made, labelled with that one); forgotten, it gets a whole
// grace from then on before they go.
func TestReconcileKeepsKnownProjects(t *testing.T) {
	d, _ := projectDriver(t)
	sfx := uuid.NewString()[:8]
	project := "gpuaas-known-" + sfx
	inst := "inst" + sfx
	nets := []string{projectNetwork(t, d, project, d.Labels(docker.Owner{TaskID: "earlier-" + sfx, InstanceID: inst}, nil))}
	vols := []string{projectVolume(t, d, project, "data", d.Labels(docker.Owner{TaskID: "up-" + sfx, InstanceID: inst}, nil))}
	known := true
	var asked []nodeapi.Workload
	now := time.Now()
	r := &docker.Reconciler{D: d, Grace: time.Minute, Now: func() time.Time { return now },
		Known: func(w nodeapi.Workload) bool {
			if w.ComposeProject == project {
				asked = append(asked, w)
			}
			return known && w.TaskID == "up-"+sfx
		}}
	pass(t, r, nil, nil)
	now = now.Add(2 * time.Minute)
	pass(t, r, nil, nil)
	exist(t, d, true, nets, vols)
	for _, w := range asked {
		if w.InstanceID != inst || w.ContainerID != "" || (w.Name != nets[0] && w.Name != vols[0]) {
			t.Fatalf("Known was asked about %+v", w)
		}
	}
	// The task's record is pruned: the grace starts now, not when the
	// resources were first seen.
	known = false
	pass(t, r, nil, nil)
	now = now.Add(2 * time.Minute)
	pass(t, r, nets, vols)
	exist(t, d, false, nets, vols)
}

// A project that still has a container on the engine, even a stopped one
// of no gpuaas task, keeps its network and volume whatever Known says;
// once the container is gone they go after the grace.
func TestReconcileKeepsProjectsWithAContainer(t *testing.T) {
	d, dk := projectDriver(t)
	t.Cleanup(dk.RemoveImages)
	ctx := context.Background()
	sfx := uuid.NewString()[:8]
	tag := "gpuaas-agent-test/reconcile-" + sfx + ":build"
	agenttest.BuildServerImage(t, dk, tag, "")
	project := "gpuaas-stopped-" + sfx
	labels := d.Labels(docker.Owner{TaskID: "gone-" + sfx, InstanceID: "inst" + sfx}, nil)
	nets := []string{projectNetwork(t, d, project, labels)}
	vols := []string{projectVolume(t, d, project, "data", labels)}
	c, err := d.C.ContainerCreate(ctx, client.ContainerCreateOptions{Name: project + "-db-1",
		Config:     &container.Config{Image: tag, Labels: map[string]string{labelComposeProject: project}},
		HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode(nets[0])}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.C.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := d.C.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.ContainerStop(ctx, c.ID, client.ContainerStopOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r := &docker.Reconciler{D: d, Grace: time.Minute, Now: func() time.Time { return now },
		Known: func(nodeapi.Workload) bool { return false }}
	pass(t, r, nil, nil)
	now = now.Add(2 * time.Minute)
	pass(t, r, nil, nil)
	exist(t, d, true, nets, vols)
	if _, err := d.C.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	pass(t, r, nil, nil)
	now = now.Add(2 * time.Minute)
	pass(t, r, nets, vols)
	exist(t, d, false, nets, vols)
}

// Only this node's managed project networks and volumes are reaped: one
// without the gpuaas label, one of another node and a managed one with no
// node label at all are never touched, however long they are orphans.
func TestReconcileTouchesOnlyThisNodesProjects(t *testing.T) {
	d, _ := projectDriver(t)
	sfx := uuid.NewString()[:8]
	owner := docker.Owner{TaskID: "gone-" + sfx, InstanceID: "inst" + sfx}
	mine := d.Labels(owner, nil)
	other := d.Labels(owner, nil)
	other[nodeapi.LabelNode] = "other-node-" + sfx
	noNode := d.Labels(owner, nil)
	delete(noNode, nodeapi.LabelNode)
	plain := map[string]string{nodeapi.LabelNode: mine[nodeapi.LabelNode]}
	var keptNets, keptVols []string
	for name, l := range map[string]map[string]string{"other": other, "nonode": noNode, "plain": plain} {
		project := "gpuaas-" + name + "-" + sfx
		keptNets = append(keptNets, projectNetwork(t, d, project, l))
		keptVols = append(keptVols, projectVolume(t, d, project, "data", l))
	}
	orphan := "gpuaas-mine-" + sfx
	nets := []string{projectNetwork(t, d, orphan, mine)}
	vols := []string{projectVolume(t, d, orphan, "data", mine)}
	now := time.Now()
	r := &docker.Reconciler{D: d, Grace: time.Minute, Now: func() time.Time { return now },
		Known: func(nodeapi.Workload) bool { return false }}
	pass(t, r, nil, nil)
	now = now.Add(2 * time.Minute)
	pass(t, r, nets, vols)
	now = now.Add(time.Hour)
	pass(t, r, nil, nil)
	exist(t, d, false, nets, vols)
	exist(t, d, true, keptNets, keptVols)
}
