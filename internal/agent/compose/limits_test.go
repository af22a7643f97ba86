package compose_test

import (
	"context"
	"slices"
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/agent/compose"
	"github.com/gpuaas/gpuaas/internal/agent/docker"
	"github.com/moby/moby/client"
)

// The limits a renderer gives a service (cpus, mem_limit, shm_size) hold
// on the engine, every service is held to the workload process limit, and
// no service sees a GPU the task did not give it, whatever its environment
// says (the container's environment overrides an image's ENV the same way).
func TestComposeServiceLimits(t *testing.T) {
	e := setupEngine(t, "lim")
	ctx := context.Background()
	yaml := `services:
  web:
    image: ` + e.ref + `
    cpus: 0.5
    mem_limit: 96m
    shm_size: 32m
    environment:
      NVIDIA_VISIBLE_DEVICES: all
  side:
    image: ` + e.ref + `
    environment:
      PORT: "9000"
      NVIDIA_VISIBLE_DEVICES: all
`
	up := nodeapi.ComposeUp{Project: e.project, YAML: []byte(yaml), Service: "web",
		Images: []nodeapi.ImagePull{e.pull(t)}}
	out, err := compose.Up(ctx, e.d, docker.Owner{TaskID: "t-" + e.inst, InstanceID: e.inst}, up)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	for _, id := range out.ContainerIDs {
		ins, err := e.d.C.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc, hc := ins.Container.Config.Labels[compose.LabelService], ins.Container.HostConfig
		if p := hc.PidsLimit; p == nil || *p != docker.PidsLimit {
			t.Errorf("%s: pids limit %v, want %d", svc, p, docker.PidsLimit)
		}
		if env := ins.Container.Config.Env; !slices.Contains(env, docker.VisibleDevicesEnv+"=void") || slices.Contains(env, docker.VisibleDevicesEnv+"=all") {
			t.Errorf("%s: a service without GPUs has the environment %v", svc, env)
		}
		if svc == "web" && (hc.NanoCPUs != 5e8 || hc.Memory != 96<<20 || hc.ShmSize != 32<<20) {
			t.Errorf("web: cpus %d nano, memory %d, shm %d; want 0.5 CPU, 96 MiB, 32 MiB", hc.NanoCPUs, hc.Memory, hc.ShmSize)
		}
	}
}

// No service of a project can gain privileges (a setuid binary in its
// image runs with its caller's) nor open raw sockets on the project's
// bridge, and each keeps the rest of the default capabilities: what the
// kernel holds for each service's own process, read inside its container,
// and what the engine was asked for.
func TestComposeServicesDropPrivileges(t *testing.T) {
	e := setupEngine(t, "prv")
	ctx := context.Background()
	yaml := `services:
  web:
    image: ` + e.ref + `
    ports: ["8080"]
    depends_on: [side]
  side:
    image: ` + e.ref + `
    ports: ["9000"]
    environment:
      PORT: "9000"
`
	up := nodeapi.ComposeUp{Project: e.project, YAML: []byte(yaml), Service: "web", Readiness: &nodeapi.Readiness{Port: 8080, HTTPPath: "/", TimeoutSeconds: 30},
		Images: []nodeapi.ImagePull{e.pull(t)}}
	out, err := compose.Up(ctx, e.d, docker.Owner{TaskID: "t-" + e.inst, InstanceID: e.inst}, up)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	if len(out.ContainerIDs) != 2 {
		t.Fatalf("containers %v", out.ContainerIDs)
	}
	for _, id := range out.ContainerIDs {
		ins, err := e.d.C.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc, hc := ins.Container.Config.Labels[compose.LabelService], ins.Container.HostConfig
		ports, err := e.d.BoundPorts(ctx, id)
		if err != nil || len(ports) != 1 {
			t.Fatalf("%s: ports %v %v", svc, ports, err)
		}
		agenttest.CheckHardened(t, "service "+svc, ports[0].Host)
		if !slices.Equal(hc.SecurityOpt, []string{docker.NoNewPrivileges}) || !(slices.Contains(hc.CapDrop, "NET_RAW") || slices.Contains(hc.CapDrop, "CAP_NET_RAW")) ||
			hc.Privileged || len(hc.CapAdd) != 0 {
			t.Errorf("%s: security options %v, dropped %v, added %v, privileged %v", svc, hc.SecurityOpt, hc.CapDrop, hc.CapAdd, hc.Privileged)
		}
	}
}
