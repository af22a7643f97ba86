package agent

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/agent/docker"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
	"github.com/gpuaas/gpuaas/internal/agent/engine"
)

// An image.pull task whose registry answers the pull by digest with content
// of another digest fails with reason digest_mismatch (the result the agent
// reports for the task): the engine verifies the manifest against the
// digest asked for. A container.run of that image fails the same way and
// never starts.
func TestTaskFailsOnDigestMismatch(t *testing.T) {
	agenttest.RequireDocker(t)
	reg := agenttest.TamperedRegistry(t)
	d, err := docker.New(docker.Config{NodeID: "test-node-digest", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a := &Agent{drv: engine.Wrap(d, driver.Config{})}
	pull := nodeapi.ImagePull{Repository: reg.Repository, Digest: reg.Asked}
	for kind, payload := range map[string]any{
		nodeapi.KindImagePull:    pull,
		nodeapi.KindContainerRun: nodeapi.ContainerRun{Name: "gpuaas-test-digest", Image: pull},
	} {
		b, _ := json.Marshal(payload)
		res := a.execute(context.Background(), nodeapi.Task{ID: "task-" + kind, Kind: kind, InstanceID: "inst-digest", Payload: b})
		if res.State != nodeapi.ResultFailed || res.ReasonCode != nodeapi.ReasonDigestMismatch {
			t.Fatalf("%s: %+v", kind, res)
		}
		if !reg.AskedByDigest() {
			t.Fatalf("%s: the engine did not ask the registry for the pinned digest", kind)
		}
	}
}
