package compose_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/compose"
	"github.com/gpuaas/gpuaas/internal/agent/docker"
)

// An up that fails half-way (its service's container is created but cannot
// start) leaves the project's network and volume behind. While its task is
// known the reconcile pass keeps all of it; once the task is forgotten the
// container goes as an orphan after the grace, and the network and volume
// a grace after the project's last container.
func TestReconcileReapsWhatAFailedUpLeft(t *testing.T) {
	e := setupEngine(t, "reap")
	// A node of its own: no other test's pass sees this project.
	e.d.SetNodeID("compose-reap-" + uuid.NewString()[:8])
	ctx := context.Background()
	yaml := `services:
  web:
    image: ` + e.ref + `
    entrypoint: ["/no-such-binary"]
    volumes: ["data:/data"]
volumes:
  data: {}
`
	task := "t-" + e.inst
	_, err := compose.Up(ctx, e.d, docker.Owner{TaskID: task, InstanceID: e.inst},
		nodeapi.ComposeUp{Project: e.project, YAML: []byte(yaml), Service: "web", Images: []nodeapi.ImagePull{e.pull(t)}})
	if f := docker.AsFailure(err); f == nil || f.Reason != nodeapi.ReasonContainerExited {
		t.Fatalf("up: %v", err)
	}
	left, err := e.d.Verify(ctx, e.inst, nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	if len(left) != 3 || !strings.HasPrefix(left[0], "container:") || left[1] != "network:"+e.project+"_default" || left[2] != "volume:"+e.project+"_data" {
		t.Fatalf("the failed up left %v", left)
	}

	known := true
	now := time.Now()
	r := &docker.Reconciler{D: e.d, Grace: time.Minute, Now: func() time.Time { return now },
		Known: func(w nodeapi.Workload) bool { return known && w.TaskID == task }}
	run := func(containers int, networks, volumes []string) {
		t.Helper()
		res, err := r.Run(ctx)
		if err != nil || len(res.Removed) != containers || !slices.Equal(res.RemovedNetworks, networks) || !slices.Equal(res.RemovedVolumes, volumes) {
			t.Fatalf("at %v: %v %+v", now, err, res)
		}
	}
	run(0, nil, nil)
	now = now.Add(2 * time.Minute)
	run(0, nil, nil)
	known = false // the task's record is pruned
	run(0, nil, nil)
	now = now.Add(2 * time.Minute)
	run(1, nil, nil)
	now = now.Add(2 * time.Minute)
	run(0, []string{e.project + "_default"}, []string{e.project + "_data"})
	if left, err := e.d.Verify(ctx, e.inst, nil); err != nil || len(left) != 0 {
		t.Fatalf("left after the reconcile: %v %v", left, err)
	}
}
