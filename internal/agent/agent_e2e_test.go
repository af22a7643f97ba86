package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/moby/moby/client"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// buildGpuaas is the real binary, built once per test process.
func buildGpuaas(t *testing.T) string { return testbin.Gpuaas(t) }

// fakeSMIPath returns a PATH whose first entry holds the fixture nvidia-smi.
func fakeSMIEnv(t *testing.T) []string {
	_, file, _, _ := runtime.Caller(0)
	inv := filepath.Join(filepath.Dir(file), "inventory", "testdata")
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(inv, "fake-nvidia-smi"), filepath.Join(dir, "nvidia-smi")); err != nil {
		t.Fatal(err)
	}
	return []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH"), "FAKE_NVIDIA_SMI_DIR=" + filepath.Join(inv, "h100-80gb-hbm3")}
}

type proc struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	out bytes.Buffer
}

func (p *proc) Write(b []byte) (int, error) { p.mu.Lock(); defer p.mu.Unlock(); return p.out.Write(b) }
func (p *proc) String() string              { p.mu.Lock(); defer p.mu.Unlock(); return p.out.String() }

func startAgent(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{}
	p.cmd = exec.Command(bin, append([]string{"agent"}, args...)...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		if t.Failed() {
			t.Logf("agent output:\n%s", p.String())
		}
	})
	return p
}

// eventually polls cond (an external process's state has no hook to wait on)
// until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %s", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The agent as its own process against a real server and the real engine:
// it joins once with a token (the token is then spent), reports the
// inventory its nvidia-smi gives, runs a task that pulls by digest with
// node-bound pull credentials, goes down when killed and comes back ready
// after a restart with its container adopted (same id, same start time).
func TestAgentProcessEndToEnd(t *testing.T) {
	dk := agenttest.RequireDocker(t)
	t.Cleanup(dk.RemoveImages)
	bin := buildGpuaas(t)
	s := servertest.Start(t, store.SQLite, func(c *config.Config) {
		c.NodeHeartbeatTTL = 3 * time.Second
		c.NodeHeartbeatGrace = time.Second
	})
	admin := s.Admin()
	img := agenttest.PushServerImage(t, dk, s, admin, "e2e"+strings.ReplaceAll(uuid.NewString()[:8], "-", ""))
	ctx := principal.With(context.Background(), principal.SystemActor)

	jt := admin.Do("POST", "/api/v1/admin/nodes/join-tokens", map[string]any{"description": "e2e"}).Want(t, 201).String("join_token")
	dataDir := t.TempDir()
	env := fakeSMIEnv(t)
	name := "e2e-" + uuid.NewString()[:8]
	args := []string{"--server", s.URL, "--join-token", jt, "--data-dir", dataDir, "--name", name, "--poll-wait", "2"}
	a := startAgent(t, bin, env, args...)

	var nodeID string
	eventually(t, 60*time.Second, "node ready", func() bool {
		items := admin.Do("GET", "/api/v1/admin/nodes", nil).Want(t, 200).Items()
		for _, n := range items {
			if n["name"] == name && n["state"] == "ready" {
				nodeID = n["id"].(string)
				return true
			}
		}
		return false
	})
	t.Cleanup(func() {
		dc, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return
		}
		res, _ := dc.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", nodeapi.LabelNode+"="+nodeID)})
		for _, c := range res.Items {
			dc.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		}
		dc.Close()
	})
	if fi, err := os.Stat(filepath.Join(dataDir, "node.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("node key: %v %v", err, fi)
	}
	// The join token is spent.
	if r := s.Anonymous().Do("POST", "/api/v1/nodes/join", nodeapi.JoinRequest{JoinToken: jt, Name: "again", PublicKeyPEM: "x"}); r.Status < 400 || r.Status >= 500 {
		t.Fatalf("second join: %d %s", r.Status, r.Body)
	}
	// The inventory is what the fixture nvidia-smi says.
	n := admin.Do("GET", "/api/v1/admin/nodes/"+nodeID, nil).Want(t, 200)
	var inv nodeapi.Inventory
	raw, _ := json.Marshal(n.JSON["inventory"])
	if err := json.Unmarshal(raw, &inv); err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) != 1 || inv.GPUs[0].Model != "NVIDIA H100 80GB HBM3" || inv.GPUs[0].MemoryMiB != 81559 ||
		inv.GPUs[0].UUID != "GPU-98e5121e-2dbb-b8b3-6905-649d1ad7d6b4" || inv.NVIDIADriver != "580.159.04" || inv.CUDAVersion != "13.0" || inv.DockerVersion == "" {
		t.Fatalf("inventory %s", raw)
	}

	// A container.run task with node-bound pull credentials.
	it, err := s.App.API.Artifacts.CreateNodePullIntent(ctx, nodeID, s.Creds.ProjectID, img.ArtifactID)
	if err != nil {
		t.Fatal(err)
	}
	inst := "inst-" + uuid.NewString()[:8]
	task, err := s.App.Nodes.EnqueueTask(ctx, nil, nodeID, nodeapi.KindContainerRun, nodeapi.ContainerRun{Name: "gpuaas-e2e-" + inst, Image: it.ImagePull(),
		Ports: []nodeapi.PortMapping{{Container: 8080}}, Readiness: &nodeapi.Readiness{Port: 8080, HTTPPath: "/", TimeoutSeconds: 30}}, inst, s.Creds.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	var done nodes.NodeTask
	eventually(t, 90*time.Second, "task result", func() bool {
		got, err := s.App.Nodes.Task(ctx, task.ID)
		done = got.NodeTask
		return err == nil && (got.State == "succeeded" || got.State == "failed")
	})
	if done.State != "succeeded" {
		t.Fatalf("task %s: %s %s %s", done.State, done.ReasonCode, done.Message, done.Result)
	}
	var res nodeapi.TaskResult
	var out nodeapi.RunOutput
	if json.Unmarshal(done.Result, &res) != nil || json.Unmarshal(res.Output, &out) != nil || len(out.ContainerIDs) != 1 {
		t.Fatalf("result %s", done.Result)
	}
	cid := out.ContainerIDs[0]
	dc, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	before, err := dc.ContainerInspect(context.Background(), cid, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Kill the agent: the node goes down within TTL + grace (+ a sweep).
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.cmd.Wait()
	eventually(t, 15*time.Second, "node down", func() bool {
		return admin.Do("GET", "/api/v1/admin/nodes/"+nodeID, nil).Want(t, 200).String("state") == "down"
	})

	// Restart without a join token: same identity, ready again, container adopted.
	startAgent(t, bin, env, "--server", s.URL, "--data-dir", dataDir, "--name", name, "--poll-wait", "2", "--orphan-grace", "2s")
	eventually(t, 30*time.Second, "node ready again", func() bool {
		return admin.Do("GET", "/api/v1/admin/nodes/"+nodeID, nil).Want(t, 200).String("state") == "ready"
	})
	// Longer than the orphan grace: a known container must survive it.
	time.Sleep(3 * time.Second)
	after, err := dc.ContainerInspect(context.Background(), cid, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("container gone after restart: %v", err)
	}
	if after.Container.State.StartedAt != before.Container.State.StartedAt || !after.Container.State.Running {
		t.Fatalf("container restarted: %s → %s", before.Container.State.StartedAt, after.Container.State.StartedAt)
	}
	// The heartbeat carries each workload's start time, as the engine has
	// it, into what the control plane stores and serves.
	started, err := time.Parse(time.RFC3339Nano, before.Container.State.StartedAt)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the node reports the container's start time", func() bool {
		var n struct {
			Workloads []nodeapi.Workload `json:"workloads"`
		}
		if json.Unmarshal(admin.Do("GET", "/api/v1/admin/nodes/"+nodeID, nil).Want(t, 200).Body, &n) != nil {
			return false
		}
		return slices.ContainsFunc(n.Workloads, func(w nodeapi.Workload) bool { return w.ContainerID == cid && w.StartedAt.Equal(started) })
	})
	count := 0
	for _, nn := range admin.Do("GET", "/api/v1/admin/nodes", nil).Want(t, 200).Items() {
		if nn["name"] == name {
			count++
		}
	}
	if count != 1 {
		t.Fatalf("%d nodes named %s: the agent joined again", count, name)
	}
}
