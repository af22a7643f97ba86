package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/instances/instancetest"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// agentProcess is `gpuaas agent` as a child process joined to a server, so
// a test can SIGKILL it and start it again on the same data directory.
type agentProcess struct {
	t       testing.TB
	bin     string
	server  string
	dataDir string
	name    string
	nodeID  string
	cmd     *exec.Cmd
}

// startRealAgent runs `gpuaas agent` as a child process joined to the
// server with a bootstrap token, and returns it once its node is ready. It
// skips (fails under CI) when this build has no agent command. flags are
// extra agent flags.
func startRealAgent(t testing.TB, s *servertest.Server, admin *servertest.Client, bin, dataDir string, flags ...string) *agentProcess {
	t.Helper()
	return startNamedAgent(t, s, admin, bin, dataDir, "walk-node", flags...)
}

// startNamedAgent is startRealAgent for a node of the given name (a second
// agent beside the first).
func startNamedAgent(t testing.TB, s *servertest.Server, admin *servertest.Client, bin, dataDir, name string, flags ...string) *agentProcess {
	t.Helper()
	if out, err := exec.Command(bin, "agent", "--help").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and this build has no `gpuaas agent`: %s", out)
		}
		t.Skipf("!!! SKIPPED: this build has no `gpuaas agent` (the agent branch has not merged); the real-agent walk is NOT tested !!!\n%s", out)
	}
	jt := admin.Do("POST", "/api/v1/admin/nodes/join-tokens", map[string]any{"description": "docker walk"}).Want(t, 201).String("join_token")
	a := &agentProcess{t: t, bin: bin, server: s.URL, dataDir: dataDir, name: name}
	t.Cleanup(func() {
		if a.cmd != nil && a.cmd.ProcessState == nil {
			_ = a.cmd.Process.Kill()
			_ = a.cmd.Wait()
		}
	})
	a.start(jt, flags...)
	a.waitReady(admin)
	return a
}

// start starts the agent; joinToken is needed on the first start only.
func (a *agentProcess) start(joinToken string, flags ...string) {
	a.t.Helper()
	args := append([]string{"agent", "--server", a.server, "--data-dir", a.dataDir, "--name", a.name, "--poll-wait", "5"}, flags...)
	if joinToken != "" {
		args = append(args, "--join-token", joinToken)
	}
	a.cmd = exec.Command(a.bin, args...)
	log, err := os.OpenFile(a.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		a.t.Fatal(err)
	}
	a.cmd.Stdout, a.cmd.Stderr = log, log
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
}

func (a *agentProcess) logPath() string { return filepath.Join(a.dataDir, "..", "agent.log") }

// waitReady waits until the agent's node is ready and records its id.
func (a *agentProcess) waitReady(admin *servertest.Client) {
	a.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range admin.Do("GET", "/api/v1/admin/nodes", nil).Want(a.t, 200).Items() {
			if n["name"] == a.name && n["state"] == "ready" {
				a.nodeID = n["id"].(string)
				return
			}
		}
		time.Sleep(100 * time.Millisecond) // waiting for a child process to join
	}
	b, _ := os.ReadFile(a.logPath())
	a.t.Fatalf("the agent never became ready:\n%s", b)
}

// signal sends sig to the agent; SIGKILL also reaps it.
func (a *agentProcess) signal(sig syscall.Signal) {
	a.t.Helper()
	if err := a.cmd.Process.Signal(sig); err != nil {
		a.t.Fatal(err)
	}
	if sig == syscall.SIGKILL {
		_ = a.cmd.Wait()
	}
}

// removeInstanceOnExit removes, whatever failed, every container, network
// and volume Docker still holds for an instance when the test ends.
func removeInstanceOnExit(t *testing.T, d agenttest.Docker, id string) {
	t.Cleanup(func() {
		list := func(args ...string) []string {
			out, _ := d.Run("", append(args, "-q", "--filter", "label=gpuaas.instance_id="+id)...)
			return strings.Fields(out)
		}
		for _, c := range list("ps", "-a") {
			_, _ = d.Run("", "rm", "-f", c)
		}
		for _, n := range list("network", "ls") {
			_, _ = d.Run("", "network", "rm", n)
		}
		for _, v := range list("volume", "ls") {
			_, _ = d.Run("", "volume", "rm", "-f", v)
		}
	})
}

// withRealAgent starts a real agent for e's server in a fresh data dir and
// gives the project an allocation on its node; it returns the agent and its
// data dir.
func (e *instanceEnv) withRealAgent(t *testing.T, bin string, flags ...string) (*agentProcess, string) {
	t.Helper()
	agentDir := filepath.Join(t.TempDir(), "agent")
	if err := os.MkdirAll(agentDir, 0o700); err != nil {
		t.Fatal(err)
	}
	a := startRealAgent(t, e.s, e.admin, bin, agentDir, flags...)
	e.alloc = e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 0, "sku": "cpu.0x", "node_id": a.nodeID}).Want(t, 201).String("id")
	return a, agentDir
}

// requireTornDown fails unless Docker holds no container, network or volume
// of the instance and the agent's data dir no path of it.
func requireTornDown(t *testing.T, d agenttest.Docker, id, agentDir string) {
	t.Helper()
	if left := dockerLeft(t, d, id); len(left) > 0 {
		t.Fatalf("Docker still holds: %v", left)
	}
	_ = filepath.WalkDir(agentDir, func(p string, _ os.DirEntry, _ error) error {
		if strings.Contains(p, id) {
			t.Errorf("scratch left on the node: %s", p)
		}
		return nil
	})
}

// timeline is the instance's event types in order.
func timeline(t *testing.T, e *instanceEnv, id string) []string {
	t.Helper()
	var types []string
	for _, it := range e.bot.Do("GET", e.path("/app-instances/"+id+"/events?limit=100"), nil).Want(t, 200).Items() {
		types = append(types, it["event_type"].(string))
	}
	return types
}

// httpGet fetches url and returns the body (or "" when nothing answers).
func httpGet(url string) string {
	c := &http.Client{Timeout: 2 * time.Second}
	r, err := c.Get(url)
	if err != nil {
		return ""
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// dockerLeft lists what Docker still holds for an instance.
func dockerLeft(t testing.TB, d agenttest.Docker, instanceID string) []string {
	t.Helper()
	var left []string
	for _, args := range [][]string{
		{"ps", "-a", "-q", "--filter", "label=gpuaas.instance_id=" + instanceID},
		{"network", "ls", "-q", "--filter", "label=gpuaas.instance_id=" + instanceID},
		{"volume", "ls", "-q", "--filter", "label=gpuaas.instance_id=" + instanceID},
	} {
		out := strings.TrimSpace(d.Must("", args...))
		if out != "" {
			left = append(left, args[0]+": "+out)
		}
	}
	return left
}

// The acceptance walk on a real server with a real agent and the
// real Docker engine, as a service account: create → running, the app
// answers on its access endpoint with its identity mounted; upgrade to v2;
// an upgrade to a release whose container exits reverts by itself and v2
// keeps serving; rollback to v1; decommission → decommissioned and Docker
// holds nothing of the instance, nor does the agent's scratch space.
func TestInstanceDockerWalk(t *testing.T) {
	t.Parallel()
	d := agenttest.RequireDocker(t)
	bin := buildGpuaas(t)
	images := map[string]v1.Image{
		"1.0.0": instancetest.Image(t, instancetest.Build(t, "1.0.0", instancetest.ModeServe)),
		"2.0.0": instancetest.Image(t, instancetest.Build(t, "2.0.0", instancetest.ModeServe)),
		"3.0.0": instancetest.Image(t, instancetest.Build(t, "3.0.0", instancetest.ModeExit)),
	}
	s := servertest.Start(t, store.SQLite)
	e := setupInstanceEnv(t, s, "echo", images, echoManifest("echo"), -1)
	// A short image grace: the images of the decommissioned instance go.
	// The grace also covers the gap between a version's image.pull task and
	// its container.run (a few task round trips): 2 s was too short for it
	// on a loaded CI machine, which pruned the image of a revert in between.
	_, agentDir := e.withRealAgent(t, bin, "--image-prune-grace", "10s")

	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "walk"}).Want(t, 202)
	id := cr.String("id")
	removeInstanceOnExit(t, d, id)
	if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("create: %s\n%s", op.Body, e.bot.Do("GET", e.path("/app-instances/"+id+"/logs"), nil).Body)
	}
	inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	access, _ := inst.JSON["access"].(map[string]any)
	url, _ := access["local_url"].(string)
	if body := httpGet(url); !strings.Contains(body, "version=1.0.0") {
		t.Fatalf("v1 at %s answers %q (%s)", url, body, inst.Body)
	}
	var who map[string]any
	_ = json.Unmarshal([]byte(httpGet(url+"whoami")), &who)
	if who["identity_file"] != true || who["key_in_env"] != false || who["instance"] != id {
		t.Fatalf("workload identity: %v", who)
	}

	step := func(action, version string) *servertest.Response {
		t.Helper()
		r := e.bot.Do("POST", e.path("/app-instances/"+id+"/"+action), map[string]string{"target_version": version}).Want(t, 202)
		return waitOp(t, e.bot, e.pid, r.String("operation_id"))
	}
	if op := step("upgrade", "2.0.0"); op.String("state") != "succeeded" {
		t.Fatalf("upgrade: %s", op.Body)
	}
	inst = e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	url = inst.JSON["access"].(map[string]any)["local_url"].(string)
	if body := httpGet(url); !strings.Contains(body, "version=2.0.0") || inst.String("digest") != e.digests["2.0.0"] {
		t.Fatalf("v2: %q %s", body, inst.Body)
	}
	if op := step("upgrade", "3.0.0"); op.String("state") != "failed" || op.String("reason_code") != "container_exited" {
		t.Fatalf("broken upgrade: %s", op.Body)
	}
	inst = e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	url = inst.JSON["access"].(map[string]any)["local_url"].(string)
	if body := httpGet(url); !strings.Contains(body, "version=2.0.0") || inst.String("reason_code") != "upgrade_reverted" {
		t.Fatalf("after the revert: %q %s", body, inst.Body)
	}
	if op := step("rollback", "1.0.0"); op.String("state") != "succeeded" {
		t.Fatalf("rollback: %s", op.Body)
	}
	inst = e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	url = inst.JSON["access"].(map[string]any)["local_url"].(string)
	if body := httpGet(url); !strings.Contains(body, "version=1.0.0") {
		t.Fatalf("rolled back: %q", body)
	}

	// The image of the running version is kept, whatever the grace.
	time.Sleep(11 * time.Second)
	if held := strings.Join(pulledDigests(t, d, e.digests), " "); !strings.Contains(held, "1.0.0") {
		t.Fatalf("the running version's image was pruned (held: %s)", held)
	}
	dec := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("decommission: %s", op.Body)
	}
	requireTornDown(t, d, id, agentDir)
	// The agent prunes the images it pulled once no container has used
	// them for --image-prune-grace.
	deadline := time.Now().Add(30 * time.Second)
	for {
		held := pulledDigests(t, d, e.digests)
		if len(held) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after decommission the engine still holds %v", held)
		}
		time.Sleep(250 * time.Millisecond) // waiting for the agent's reconcile pass
	}
}

// pulledDigests are the digests of versions the local engine holds.
func pulledDigests(t *testing.T, d agenttest.Docker, digests map[string]string) []string {
	t.Helper()
	out := d.Must("", "images", "--digests", "--format", "{{.Digest}}")
	var held []string
	for v, dg := range digests {
		if strings.Contains(out, dg) {
			held = append(held, v)
		}
	}
	return held
}

// The curated vllm_openai Compose renderer on a real agent: a stand-in
// OpenAI-compatible server (built in the test, answering /v1/models) as the
// primary service plus a metrics sidecar, from two verified artifacts. The
// instance runs, its OpenAI endpoint answers on the access port, and
// decommission leaves no container, network, volume or scratch path.
func TestInstanceVLLMComposeDocker(t *testing.T) {
	t.Parallel()
	d := agenttest.RequireDocker(t)
	bin := buildGpuaas(t)
	s := servertest.Start(t, store.SQLite)
	e := setupInstanceEnv(t, s, "vllm-openai", nil, nil, -1)
	const version = "0.6.3"
	serverImg := instancetest.Image(t, instancetest.Build(t, version, instancetest.ModeOpenAI))
	sidecarImg := instancetest.Image(t, instancetest.Build(t, version, instancetest.ModeServe))
	_, vllmRepo, vllmDigest := e.publishArtifact(t, "vllm-openai", version, "vllm", serverImg)
	_, sideRepo, sideDigest := e.publishArtifact(t, "vllm-openai", version, "metrics-sidecar", sidecarImg)
	m := map[string]any{
		"slug": "vllm-openai", "display_name": "vLLM (OpenAI-compatible)", "version": version, "runtime_backend": "docker_compose",
		"supported_modes": map[string]any{"operating_modes": []string{"tenant_dedicated"}, "control_plane_scopes": []string{"project"}},
		"compatibility":   map[string]any{"requires_capacity_shape": []string{"baremetal", "gpu_slice"}, "supported_accelerators": []string{"nvidia", "cpu"}},
		"artifacts": []map[string]any{
			{"name": "vllm", "artifact_kind": "oci", "source_type": "oci_registry", "repository": vllmRepo, "digest": vllmDigest},
			{"name": "metrics-sidecar", "artifact_kind": "oci", "source_type": "oci_registry", "repository": sideRepo, "digest": sideDigest}},
		"runtime_profile": map[string]any{"kind": "docker_compose", "renderer": "vllm_openai",
			"topology": map[string]any{
				"services": []map[string]any{{"name": "server", "role": "primary", "artifact": "vllm", "gpu": true}, {"name": "metrics", "role": "sidecar", "artifact": "metrics-sidecar"}},
				"endpoints": []map[string]any{{"name": "openai", "service": "server", "port": 8000, "expose": "private_host_local", "protocol": "openai_api"},
					{"name": "metrics", "service": "metrics", "port": 8080, "expose": "none", "protocol": "http"}},
				"mounts": []map[string]any{{"name": "models", "service": "server", "target": "/root/.cache/huggingface", "source": "model_cache"}}},
			"resources": map[string]any{"gpu_count": map[string]any{"default": 0, "min": 0, "max": 8}},
			"readiness": map[string]any{"type": "http", "path": "/v1/models", "port": 8000, "period_seconds": 1, "failure_threshold": 30},
			"parameters": map[string]any{"type": "object", "required": []string{"model"}, "properties": map[string]any{
				"model": map[string]any{"type": "string"}, "max_model_len": map[string]any{"type": "integer", "default": 4096}}}},
	}
	e.admin.Do("POST", "/api/v1/admin/apps/manifests", m).Want(t, 201)
	e.admin.Do("POST", "/api/v1/admin/apps/catalog/vllm-openai/versions/"+version+"/publish", map[string]string{"reason": "release"}).Want(t, 200)
	e.admin.Do("PUT", e.path("/apps/entitlements/vllm-openai"), map[string]any{"enabled": true}).Want(t, 200)
	_, agentDir := e.withRealAgent(t, bin)

	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "vllm-openai", "version": version, "display_name": "llm",
		"parameters": map[string]any{"model": "stand-in/tiny-model"}}).Want(t, 202)
	id := cr.String("id")
	removeInstanceOnExit(t, d, id)
	if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("create: %s\n%s", op.Body, e.bot.Do("GET", e.path("/app-instances/"+id+"/logs"), nil).Body)
	}
	inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	url := inst.JSON["access"].(map[string]any)["local_url"].(string)
	if body := httpGet(url + "v1/models"); !strings.Contains(body, "stand-in/tiny-model") {
		t.Fatalf("OpenAI endpoint at %s answers %q (%s)", url, body, inst.Body)
	}
	if n := len(strings.Fields(d.Must("", "ps", "-q", "--filter", "label=gpuaas.instance_id="+id))); n != 2 {
		t.Fatalf("%d containers run for the project, want server + sidecar", n)
	}
	// The instance's identity reaches the primary service only, as a
	// read-only file: the server reads it and cannot open it for writing;
	// the sidecar has no such mount. The file lives under the agent's data
	// dir until teardown.
	var who map[string]any
	_ = json.Unmarshal([]byte(httpGet(url+"whoami")), &who)
	if who["identity_file"] != true || who["identity_read_only"] != true || who["key_in_env"] != false || who["instance"] != id {
		t.Fatalf("primary's identity: %v", who)
	}
	for _, svc := range []string{"server", "metrics"} {
		c := strings.TrimSpace(d.Must("", "ps", "-q", "--filter", "label=gpuaas.instance_id="+id, "--filter", "label=com.docker.compose.service="+svc))
		mounts := strings.TrimSpace(d.Must("", "inspect", "-f", `{{range .Mounts}}{{if eq .Destination "/var/run/gpuaas/identity.json"}}{{.Type}} rw={{.RW}}{{end}}{{end}}`, c))
		if want := map[string]string{"server": "bind rw=false", "metrics": ""}[svc]; mounts != want {
			t.Fatalf("%s: identity mount %q, want %q", svc, mounts, want)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(agentDir, "instances", id, "files", "*")); len(files) != 1 {
		t.Fatalf("identity files on the node: %v", files)
	}
	dec := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("decommission: %s", op.Body)
	}
	requireTornDown(t, d, id, agentDir)
}

// containerState is "<id> <started at> <running>" of the instance's only
// container, or "" when it has none.
func containerState(t *testing.T, d agenttest.Docker, id string) string {
	t.Helper()
	// A container can go between the list and the inspect (the agent
	// replacing it): then the list is taken again.
	for range 5 {
		ids := strings.Fields(d.Must("", "ps", "-a", "-q", "--no-trunc", "--filter", "label=gpuaas.instance_id="+id))
		switch len(ids) {
		case 0:
			return ""
		case 1:
			out, err := d.Run("", "inspect", "-f", "{{.Id}} {{.State.StartedAt}} {{.State.Running}}", ids[0])
			if err != nil && strings.Contains(out+err.Error(), "No such") {
				continue
			}
			if err != nil {
				t.Fatalf("inspect %s: %v: %s", ids[0], err, out)
			}
			return strings.TrimSpace(out)
		}
		t.Fatalf("instance %s has %d containers: %v", id, len(ids), ids)
	}
	t.Fatalf("instance %s: its container kept vanishing between docker ps and docker inspect", id)
	return ""
}

// The node-loss acceptance against a real agent process and real
// Docker: SIGKILL the agent while an instance runs and the instance is
// failed with node_lost within the liveness window (TTL + grace + a sweep)
// while its container keeps serving. Start the agent again on the same
// data dir (no join token): its first heartbeat reports the container, so
// the instance is running again at once, on the same container (adopted,
// not restarted — it survives the agent's orphan reconciler too). Kill the
// agent again and remove the container behind its back: this time the
// return redeploys (deploying → running on a new container). Decommission
// leaves nothing.
//
// Serial (no t.Parallel): it bounds how late node_lost comes (TTL + grace
// + 5 s) and the agent must beat within a 3 s TTL; other tests' load
// stretches both.
func TestInstanceAgentKillRealAgent(t *testing.T) {
	d := agenttest.RequireDocker(t)
	bin := buildGpuaas(t)
	const ttl, grace = 3 * time.Second, time.Second
	s := servertest.Start(t, store.SQLite, func(c *config.Config) { c.NodeHeartbeatTTL, c.NodeHeartbeatGrace = ttl, grace })
	e := setupInstanceEnv(t, s, "echo", map[string]v1.Image{"1.0.0": instancetest.Image(t, instancetest.Build(t, "1.0.0", instancetest.ModeServe))}, echoManifest("echo"), -1)
	a, agentDir := e.withRealAgent(t, bin)
	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "lossy"}).Want(t, 202)
	id := cr.String("id")
	removeInstanceOnExit(t, d, id)
	if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("create: %s", op.Body)
	}
	url := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200).JSON["access"].(map[string]any)["local_url"].(string)
	before := containerState(t, d, id)
	if !strings.HasSuffix(before, " true") || !strings.Contains(httpGet(url), "version=1.0.0") {
		t.Fatalf("not serving: container %q", before)
	}

	lostAt := time.Now()
	a.signal(syscall.SIGKILL)
	got := waitStatus(t, e, id, "failed")
	if took := time.Since(lostAt); got.String("reason_code") != "node_lost" || took > ttl+grace+5*time.Second {
		t.Fatalf("node loss after %s: %s", took, got.Body)
	}
	t.Logf("node_lost %s after the agent's SIGKILL (TTL %s + grace %s)", time.Since(lostAt).Round(time.Millisecond), ttl, grace)
	if !strings.Contains(httpGet(url), "version=1.0.0") {
		t.Fatal("the workload stopped serving when its agent died")
	}

	// The agent returns; the container it left is adopted.
	a.start("", "--orphan-grace", "2s")
	got = waitStatus(t, e, id, "running")
	if got.String("reason_code") != "" {
		t.Fatalf("reconciled: %s", got.Body)
	}
	time.Sleep(3 * time.Second) // longer than the orphan grace: the reconciler must keep a known container
	if after := containerState(t, d, id); after != before {
		t.Fatalf("the container was not adopted: %q → %q", before, after)
	}
	if !strings.Contains(httpGet(url), "version=1.0.0") {
		t.Fatal("not serving after the agent's return")
	}

	// Again, and this time the container is gone when the agent returns.
	a.signal(syscall.SIGKILL)
	waitStatus(t, e, id, "failed")
	d.Must("", "rm", "-f", strings.Fields(before)[0])
	a.start("", "--orphan-grace", "2s")
	got = waitStatus(t, e, id, "running")
	redeployed := containerState(t, d, id)
	if redeployed == "" || strings.Fields(redeployed)[0] == strings.Fields(before)[0] || !strings.HasSuffix(redeployed, " true") {
		t.Fatalf("redeploy: container %q (was %q)", redeployed, before)
	}
	url = got.JSON["access"].(map[string]any)["local_url"].(string)
	if !strings.Contains(httpGet(url), "version=1.0.0") {
		t.Fatalf("the redeployed workload does not answer at %s", url)
	}
	if got := timeline(t, e, id); !slices.Equal(got, nodeLossTimeline) {
		t.Fatalf("timeline:\n got %v\nwant %v", got, nodeLossTimeline)
	}

	dec := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("decommission: %s", op.Body)
	}
	requireTornDown(t, d, id, agentDir)
}
