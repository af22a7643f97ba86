package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/gpuaas/gpuaas/internal/instances/instancetest"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// startRealAgent runs `gpuaas agent` as a child process joined to the
// server with a bootstrap token, and returns its node id once the node is
// ready. It skips (fails under CI) when this build has no agent command.
func startRealAgent(t testing.TB, s *servertest.Server, admin *servertest.Client, bin, dataDir string) string {
	t.Helper()
	if out, err := exec.Command(bin, "agent", "--help").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and this build has no `gpuaas agent`: %s", out)
		}
		t.Skipf("!!! SKIPPED: this build has no `gpuaas agent` (the agent branch has not merged); the real-agent walk is NOT tested !!!\n%s", out)
	}
	jt := admin.Do("POST", "/api/v1/admin/nodes/join-tokens", map[string]any{"description": "docker walk"}).Want(t, 201).String("join_token")
	cmd := exec.Command(bin, "agent", "--server", s.URL, "--join-token", jt, "--data-dir", dataDir, "--name", "walk-node")
	log, err := os.Create(filepath.Join(dataDir, "..", "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range admin.Do("GET", "/api/v1/admin/nodes", nil).Want(t, 200).Items() {
			if n["name"] == "walk-node" && n["state"] == "ready" {
				return n["id"].(string)
			}
		}
		time.Sleep(100 * time.Millisecond) // waiting for a child process to join
	}
	b, _ := os.ReadFile(log.Name())
	t.Fatalf("the agent never became ready:\n%s", b)
	return ""
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
func dockerLeft(t testing.TB, d dockerCLI, instanceID string) []string {
	t.Helper()
	var left []string
	for _, args := range [][]string{
		{"ps", "-a", "-q", "--filter", "label=gpuaas.instance_id=" + instanceID},
		{"network", "ls", "-q", "--filter", "label=gpuaas.instance_id=" + instanceID},
		{"volume", "ls", "-q", "--filter", "label=gpuaas.instance_id=" + instanceID},
	} {
		out := strings.TrimSpace(d.must("", args...))
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
	d := requireDocker(t)
	bin := buildGpuaas(t)
	images := map[string]v1.Image{
		"1.0.0": instancetest.Image(t, instancetest.Build(t, "1.0.0", instancetest.ModeServe)),
		"2.0.0": instancetest.Image(t, instancetest.Build(t, "2.0.0", instancetest.ModeServe)),
		"3.0.0": instancetest.Image(t, instancetest.Build(t, "3.0.0", instancetest.ModeExit)),
	}
	s := servertest.Start(t, store.SQLite)
	e := setupInstanceEnv(t, s, "echo", images, echoManifest("echo"), -1)
	agentDir := filepath.Join(t.TempDir(), "agent")
	if err := os.MkdirAll(agentDir, 0o700); err != nil {
		t.Fatal(err)
	}
	nodeID := startRealAgent(t, s, e.admin, bin, agentDir)
	e.alloc = e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 0, "sku": "cpu.0x", "node_id": nodeID}).Want(t, 201).String("id")

	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "walk"}).Want(t, 202)
	id := cr.String("id")
	t.Cleanup(func() { // never leave a container behind, whatever failed
		for _, args := range [][]string{{"ps", "-a", "-q", "--filter", "label=gpuaas.instance_id=" + id}} {
			for _, c := range strings.Fields(d.must("", args...)) {
				_, _ = d.run("", "rm", "-f", c)
			}
		}
	})
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

	dec := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("decommission: %s", op.Body)
	}
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

// The curated vllm_openai Compose renderer on a real agent: a stand-in
// OpenAI-compatible server (built in the test, answering /v1/models) as the
// primary service plus a metrics sidecar, from two verified artifacts. The
// instance runs, its OpenAI endpoint answers on the access port, and
// decommission leaves no container, network, volume or scratch path.
func TestInstanceVLLMComposeDocker(t *testing.T) {
	d := requireDocker(t)
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
	agentDir := filepath.Join(t.TempDir(), "agent")
	if err := os.MkdirAll(agentDir, 0o700); err != nil {
		t.Fatal(err)
	}
	nodeID := startRealAgent(t, s, e.admin, bin, agentDir)
	e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 0, "sku": "cpu.0x", "node_id": nodeID}).Want(t, 201)

	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "vllm-openai", "version": version, "display_name": "llm",
		"parameters": map[string]any{"model": "stand-in/tiny-model"}}).Want(t, 202)
	id := cr.String("id")
	t.Cleanup(func() {
		for _, c := range strings.Fields(d.must("", "ps", "-a", "-q", "--filter", "label=gpuaas.instance_id="+id)) {
			_, _ = d.run("", "rm", "-f", c)
		}
	})
	if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("create: %s\n%s", op.Body, e.bot.Do("GET", e.path("/app-instances/"+id+"/logs"), nil).Body)
	}
	inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	url := inst.JSON["access"].(map[string]any)["local_url"].(string)
	if body := httpGet(url + "v1/models"); !strings.Contains(body, "stand-in/tiny-model") {
		t.Fatalf("OpenAI endpoint at %s answers %q (%s)", url, body, inst.Body)
	}
	if n := len(strings.Fields(d.must("", "ps", "-q", "--filter", "label=gpuaas.instance_id="+id))); n != 2 {
		t.Fatalf("%d containers run for the project, want server + sidecar", n)
	}
	dec := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("decommission: %s", op.Body)
	}
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
