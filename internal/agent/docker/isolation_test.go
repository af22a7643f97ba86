package docker_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/agent/docker"
	"github.com/gpuaas/gpuaas/internal/testbin"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// dialSource connects to its argument and exits 0 when the connection is
// made, 1 when it is not within three seconds.
const dialSource = `package main

import (
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	c, err := net.DialTimeout("tcp", os.Args[1], 3*time.Second)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	c.Close()
	fmt.Println("connected")
}
`

// buildDialImage builds dialSource into an image FROM scratch, labelled
// for removal with dk's images.
func buildDialImage(t *testing.T, dk agenttest.Docker) string {
	dir := t.TempDir()
	for n, body := range map[string]string{
		"go.mod":     "module dial\n\ngo 1.21\n",
		"main.go":    dialSource,
		"Dockerfile": "FROM scratch\nLABEL " + dk.Label() + "\nCOPY dial /dial\nENTRYPOINT [\"/dial\"]\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testbin.Static(t, dir, filepath.Join(dir, "dial"), "")
	tag := "gpuaas-agent-test/dial-" + uuid.NewString()[:8] + ":build"
	dk.Must("", "build", "-q", "-t", tag, dir)
	return tag
}

// Two tenants' workloads on one node: neither reaches the other's port
// over the engine's network (only its own published, host-local port
// reaches a workload), neither sees a GPU its task did not give it however
// its env asks for one, and each is held to the workload process limit.
func TestRunIsolatesWorkloads(t *testing.T) {
	e := setup(t)
	dk := agenttest.RequireDocker(t)
	t.Cleanup(dk.RemoveImages)
	dial := buildDialImage(t, dk)
	ctx := context.Background()
	run := func(inst string) string {
		r := nodeapi.ContainerRun{Name: "gpuaas-test-" + inst, Image: e.pull(t),
			Env:   map[string]string{"PORT": "9000", docker.VisibleDevicesEnv: "all"},
			Ports: []nodeapi.PortMapping{{Container: 9000}}, Readiness: &nodeapi.Readiness{Port: 9000, HTTPPath: "/", TimeoutSeconds: 30}}
		out, err := e.d.Run(ctx, docker.Owner{TaskID: "task-" + inst, InstanceID: inst, ProjectID: e.s.Creds.ProjectID}, r)
		if err != nil {
			t.Fatalf("run %s: %v", inst, err)
		}
		return out.ContainerIDs[0]
	}
	a, b := run("insta"+uuid.NewString()[:8]), run("instb"+uuid.NewString()[:8])
	ins, err := e.d.C.ContainerInspect(ctx, b, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if env := ins.Container.Config.Env; !slices.Contains(env, docker.VisibleDevicesEnv+"=void") || slices.Contains(env, docker.VisibleDevicesEnv+"=all") {
		t.Fatalf("a workload without GPUs has the environment %v", env)
	}
	if p := ins.Container.HostConfig.PidsLimit; p == nil || *p != docker.PidsLimit {
		t.Fatalf("pids limit %v, want %d", p, docker.PidsLimit)
	}
	ip := ""
	for _, n := range ins.Container.NetworkSettings.Networks {
		if n.IPAddress.IsValid() {
			ip = n.IPAddress.String()
		}
	}
	if ip == "" {
		t.Fatalf("workload %s has no address: %+v", b[:12], ins.Container.NetworkSettings.Networks)
	}
	from := func(id string) (string, error) {
		return dk.Run("", "run", "--rm", "--network", "container:"+id, dial, ip+":9000")
	}
	// The dialer works: from b's own network namespace it reaches b.
	if out, err := from(b); err != nil || !strings.Contains(out, "connected") {
		t.Fatalf("from b's own namespace b's port does not answer: %v %s", err, out)
	}
	if out, err := from(a); err == nil || strings.Contains(out, "connected") {
		t.Fatalf("another instance's workload reaches b at %s:9000 over the engine's network: %s", ip, out)
	}
}

// The readiness probe runs on the node: a workload that answers it with a
// redirect (to the node's loopback, a metadata address) is ready as it
// stands, and the agent never requests where it points.
func TestReadinessProbeFollowsNoRedirect(t *testing.T) {
	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer target.Close()
	workload := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/admin/delete-everything", http.StatusFound)
	}))
	defer workload.Close()
	port, err := strconv.Atoi(workload.URL[strings.LastIndexByte(workload.URL, ':')+1:])
	if err != nil {
		t.Fatal(err)
	}
	d, err := docker.New(docker.Config{NodeID: "n", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.WaitReady(context.Background(), "unused", []nodeapi.PortMapping{{Container: 80, Host: port}},
		&nodeapi.Readiness{Port: 80, HTTPPath: "/healthz", TimeoutSeconds: 5}); err != nil {
		t.Fatalf("a workload answering 302 is not ready: %v", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the probe followed the workload's redirect off the workload (%d requests)", n)
	}
}

// WorkloadEnv names exactly the task's GPUs, whatever the task's env says.
func TestWorkloadEnvNamesTheTasksGPUsOnly(t *testing.T) {
	all, port := "all", "9000"
	env := map[string]*string{docker.VisibleDevicesEnv: &all, "PORT": &port, "UNSET": nil}
	if got, want := docker.WorkloadEnv(env, []string{"GPU-a", "GPU-b"}), []string{"PORT=9000", "NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b"}; !slices.Equal(got, want) {
		t.Fatalf("with GPUs: %v, want %v", got, want)
	}
	if got, want := docker.WorkloadEnv(env, nil), []string{"PORT=9000", "NVIDIA_VISIBLE_DEVICES=void"}; !slices.Equal(got, want) {
		t.Fatalf("without GPUs: %v, want %v", got, want)
	}
}

// A host port something on the node already listens on is refused before
// a container is made: the workload never takes a port the node's own
// service holds.
func TestRunRefusesAHostPortInUse(t *testing.T) {
	e := setup(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	inst := "inst" + uuid.NewString()[:8]
	_, err = e.d.Run(context.Background(), docker.Owner{TaskID: "task-" + inst, InstanceID: inst, ProjectID: e.s.Creds.ProjectID},
		nodeapi.ContainerRun{Name: "gpuaas-test-" + inst, Image: e.pull(t), Env: map[string]string{"PORT": "9000"}, Ports: []nodeapi.PortMapping{{Container: 9000, Host: port}}})
	if f := docker.AsFailure(err); f == nil || f.Reason != nodeapi.ReasonInvalidTask || !strings.Contains(f.Message, "in use") {
		t.Fatalf("run on a host port in use: %v", err)
	}
	if rem, err := e.d.Verify(context.Background(), inst, nil); err != nil || len(rem) != 0 {
		t.Fatalf("a refused run left %v %v", rem, err)
	}
}

// A container.run workload cannot gain privileges (a setuid binary in its
// image runs with its caller's) nor open raw sockets on the shared bridge,
// and keeps the rest of the default capabilities: what the kernel holds
// for the workload's own process, read inside the container, and what the
// engine was asked for.
func TestRunDropsPrivileges(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	inst := "inst" + uuid.NewString()[:8]
	out, err := e.d.Run(ctx, docker.Owner{TaskID: "task-" + inst, InstanceID: inst, ProjectID: e.s.Creds.ProjectID},
		nodeapi.ContainerRun{Name: "gpuaas-test-" + inst, Image: e.pull(t), Env: map[string]string{"PORT": "9000"},
			Ports: []nodeapi.PortMapping{{Container: 9000}}, Readiness: &nodeapi.Readiness{Port: 9000, HTTPPath: "/", TimeoutSeconds: 30}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	agenttest.CheckHardened(t, "container.run", out.Ports[0].Host)
	ins, err := e.d.C.ContainerInspect(ctx, out.ContainerIDs[0], client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.Container.HostConfig
	if !slices.Equal(hc.SecurityOpt, []string{docker.NoNewPrivileges}) || !hasCap(hc.CapDrop, "NET_RAW") || hc.Privileged || len(hc.CapAdd) != 0 {
		t.Fatalf("security options %v, dropped %v, added %v, privileged %v", hc.SecurityOpt, hc.CapDrop, hc.CapAdd, hc.Privileged)
	}
}

// hasCap reports whether caps names c, with or without the CAP_ prefix.
func hasCap(caps []string, c string) bool {
	return slices.Contains(caps, c) || slices.Contains(caps, "CAP_"+c)
}

// Harden overrides whatever a HostConfig asked for that would undo the
// policy, and keeps what it dropped besides.
func TestHardenOverrides(t *testing.T) {
	hc := docker.Harden(&container.HostConfig{Privileged: true, CapAdd: []string{"NET_RAW", "SYS_ADMIN"}, CapDrop: []string{"MKNOD"},
		SecurityOpt: []string{"seccomp=unconfined", "no-new-privileges:false"}})
	if hc.Privileged || len(hc.CapAdd) != 0 || !slices.Equal(hc.SecurityOpt, []string{docker.NoNewPrivileges}) || !slices.Equal(hc.CapDrop, []string{"MKNOD", "NET_RAW"}) {
		t.Fatalf("hardened: privileged %v, added %v, security options %v, dropped %v", hc.Privileged, hc.CapAdd, hc.SecurityOpt, hc.CapDrop)
	}
	if again := docker.Harden(hc); !slices.Equal(again.CapDrop, []string{"MKNOD", "NET_RAW"}) {
		t.Fatalf("hardened twice: dropped %v", again.CapDrop)
	}
}
