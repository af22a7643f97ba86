package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/compose"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/runtime"
)

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
const digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

func vllmVersion(t *testing.T) manifest.Version {
	t.Helper()
	data, err := os.ReadFile("../../examples/manifests/vllm-openai-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pkg, problems, err := manifest.Parse(data, "vllm-openai-compose.yaml")
	if err != nil || len(problems) > 0 {
		t.Fatalf("example manifest: %v %v", err, problems)
	}
	return pkg.Versions[0]
}

func TestRenderVLLMOpenAI(t *testing.T) {
	v := vllmVersion(t)
	d := runtime.Deployment{InstanceID: "inst-1", ProjectID: "p", OrgID: "o", NodeID: "n", AppSlug: "vllm-openai", Version: v.Version,
		Name: "gpuaas-inst-1-1", Profile: v.RuntimeProfile,
		Images:     map[string]nodeapi.ImagePull{"vllm": {Repository: "reg/apps/vllm", Digest: digestA}, "metrics-sidecar": {Repository: "reg/apps/metrics", Digest: digestB}},
		Resources:  catalog.EffectiveResources{GPUCount: 1, CPUCores: 8, MemoryGiB: 32, HostPort: 18000},
		Parameters: json.RawMessage(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_model_len":4096,"gpu_memory_utilization":0.85}`),
		GPUUUIDs:   []string{"GPU-1", "GPU-2"},
		Identity:   &runtime.Identity{ServiceAccountID: "sa", KeyID: "k", PrivateKeyPEM: "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n", TokenURL: "http://api/token", APIBaseURL: "http://api"}}
	task, err := runtime.Render(d)
	if err != nil {
		t.Fatal(err)
	}
	up, ok := task.Payload.(nodeapi.ComposeUp)
	if task.Kind != nodeapi.KindComposeUp || !ok {
		t.Fatalf("task: %+v", task)
	}
	if up.Project != d.Name || up.Service != "server" || len(up.Images) != 2 || strings.Join(up.GPUUUIDs, ",") != "GPU-1" {
		t.Fatalf("compose up: %+v", up)
	}
	if up.Readiness == nil || up.Readiness.Port != 8000 || up.Readiness.HTTPPath != "/v1/models" {
		t.Fatalf("readiness: %+v", up.Readiness)
	}
	y := string(up.YAML)
	var doc map[string]any
	if err := yaml.Unmarshal(up.YAML, &doc); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"reg/apps/vllm@" + digestA, "reg/apps/metrics@" + digestB, "127.0.0.1:18000:8000", "--model",
		"meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "4096", "device_ids", "GPU-1", "gpuaas.instance_id: inst-1", "shm_size: 8gb", "models:/root/.cache/huggingface"} {
		if !strings.Contains(y, want) {
			t.Errorf("rendered compose lacks %q:\n%s", want, y)
		}
	}
	// No secret in the YAML, no tag, nothing on a public interface, the
	// sidecar publishes nothing.
	for _, never := range []string{"PRIVATE KEY", ":latest", "0.0.0.0:", "9100:"} {
		if strings.Contains(y, never) {
			t.Errorf("rendered compose contains %q:\n%s", never, y)
		}
	}
	// The identity file is the primary's alone: only it is told where the
	// file is, and the mount names only it.
	svcs, _ := doc["services"].(map[string]any)
	for name, sv := range svcs {
		envs, _ := sv.(map[string]any)["environment"].(map[string]any)
		if _, has := envs["GPUAAS_IDENTITY_FILE"]; has != (name == up.Service) {
			t.Errorf("service %s: GPUAAS_IDENTITY_FILE present=%v", name, has)
		}
	}
	if len(svcs) != 2 {
		t.Errorf("services: %v", svcs)
	}
	// The sidecar runs inside the instance's CPU and memory as the server
	// does: no service of the project is unlimited.
	for name, sv := range svcs {
		m, _ := sv.(map[string]any)
		if fmt.Sprint(m["cpus"]) != "8" || m["mem_limit"] != "32g" {
			t.Errorf("service %s: cpus %v mem_limit %v, want 8 and 32g", name, m["cpus"], m["mem_limit"])
		}
	}
	if len(up.Mounts) != 1 || up.Mounts[0].Target != runtime.IdentityPath || !up.Mounts[0].ReadOnly || !slices.Equal(up.Mounts[0].Services, []string{up.Service}) {
		t.Fatalf("identity mount: %+v", up.Mounts)
	}
}

func TestRenderRefuses(t *testing.T) {
	v := vllmVersion(t)
	d := runtime.Deployment{Name: "x", Profile: v.RuntimeProfile, Images: map[string]nodeapi.ImagePull{"vllm": {Repository: "r", Digest: digestA}},
		Parameters: json.RawMessage(`{"model":"a/b"}`), Resources: catalog.EffectiveResources{GPUCount: 1}, GPUUUIDs: []string{"g"}}
	if _, err := runtime.Render(d); err == nil {
		t.Fatal("rendered with a sidecar artifact missing")
	}
	d.Images["metrics-sidecar"] = nodeapi.ImagePull{Repository: "r2", Digest: digestB}
	d.Resources.GPUCount = 2
	if _, err := runtime.Render(d); err == nil {
		t.Fatal("rendered more GPUs than the allocation holds")
	}
	d.Resources.GPUCount = 1
	d.Parameters = nil
	if _, err := runtime.Render(d); err == nil {
		t.Fatal("rendered without a model")
	}
	p := *v.RuntimeProfile
	p.Renderer = "raw_compose"
	d.Profile, d.Parameters = &p, json.RawMessage(`{"model":"a/b"}`)
	if _, err := runtime.Render(d); err == nil {
		t.Fatal("rendered with an unknown renderer")
	}
}

func TestRenderContainer(t *testing.T) {
	prof := &manifest.RuntimeProfile{Kind: "launchable_oci", ImageRef: "reg/a@" + digestA, Command: []string{"/app"}, Args: []string{"serve", "--port", "8888"},
		Env:       []manifest.EnvVar{{Name: "MODE", Value: "x"}},
		Ports:     []manifest.Port{{Container: 8888, Expose: "private_host_local"}, {Container: 9000, Expose: "none"}},
		Readiness: &manifest.Readiness{Type: "tcp", Port: 8888}}
	task, err := runtime.Render(runtime.Deployment{InstanceID: "i", Name: "n", Profile: prof, HostPort: 31001,
		Images:    map[string]nodeapi.ImagePull{runtime.LaunchImage: {Repository: "reg/a", Digest: digestA}},
		Resources: catalog.EffectiveResources{GPUCount: 1, CPUCores: 2, MemoryGiB: 4}, GPUUUIDs: []string{"G0", "G1"}})
	if err != nil {
		t.Fatal(err)
	}
	run := task.Payload.(nodeapi.ContainerRun)
	if run.Image.Digest != digestA || len(run.Ports) != 1 || run.Ports[0].Host != 31001 || run.MemoryMiB != 4096 ||
		strings.Join(run.GPUUUIDs, ",") != "G0" || run.Env["MODE"] != "x" || run.Labels[nodeapi.LabelInstance] != "i" || run.Readiness.HTTPPath != "" {
		t.Fatalf("run: %+v", run)
	}
	// command replaces the entrypoint, args its arguments (Kubernetes' convention).
	if strings.Join(run.Command, " ") != "/app" || strings.Join(run.Args, " ") != "serve --port 8888" {
		t.Fatalf("command %q args %q", run.Command, run.Args)
	}
	if _, ok := run.Env["GPUAAS_UI_BASE_PATH"]; ok {
		t.Errorf("a UI on its own origin was handed a base path: %v", run.Env)
	}
	if _, ok := run.Env["GPUAAS_PARAMETERS"]; ok {
		t.Errorf("a launch without parameters was handed some: %v", run.Env)
	}
	// The launch's parameters reach the app as one JSON object.
	task, err = runtime.Render(runtime.Deployment{InstanceID: "i", Name: "n", Profile: prof, Parameters: []byte(`{"greeting":"hi","workers":2}`),
		Images: map[string]nodeapi.ImagePull{runtime.LaunchImage: {Repository: "reg/a", Digest: digestA}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := task.Payload.(nodeapi.ContainerRun).Env["GPUAAS_PARAMETERS"]; got != `{"greeting":"hi","workers":2}` {
		t.Errorf("GPUAAS_PARAMETERS = %q", got)
	}
	// In the gateway's path mode the workload is told where its UI lives.
	task, err = runtime.Render(runtime.Deployment{InstanceID: "i", Name: "n", Profile: prof, UIBasePath: "/apps/instances/i/ui",
		Images: map[string]nodeapi.ImagePull{runtime.LaunchImage: {Repository: "reg/a", Digest: digestA}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := task.Payload.(nodeapi.ContainerRun).Env["GPUAAS_UI_BASE_PATH"]; got != "/apps/instances/i/ui" {
		t.Errorf("GPUAAS_UI_BASE_PATH = %q", got)
	}
}

// What a curated renderer writes reaches the workload as written: the
// agent loads the project as Compose does, interpolating `$NAME` and
// `${…}`, so a launch parameter with a `$` in it (a schema that allows one)
// must neither pick up a variable of the task's environment nor fail the
// load.
func TestRenderedComposeIsTakenLiterally(t *testing.T) {
	v := vllmVersion(t)
	for _, model := range []string{"org/m$GPUAAS_PROJECT_ID", "org/m${MISSING:?boom}", "org/$$x"} {
		params, err := json.Marshal(map[string]any{"model": model})
		if err != nil {
			t.Fatal(err)
		}
		d := runtime.Deployment{InstanceID: "inst-1", ProjectID: "proj-1", OrgID: "o", NodeID: "n", AppSlug: "vllm-openai", Version: v.Version,
			Name: "gpuaas-inst-1-1", Profile: v.RuntimeProfile, Parameters: params, GPUUUIDs: []string{"GPU-1"},
			Images:    map[string]nodeapi.ImagePull{"vllm": {Repository: "reg/apps/vllm", Digest: digestA}, "metrics-sidecar": {Repository: "reg/apps/metrics", Digest: digestB}},
			Resources: catalog.EffectiveResources{GPUCount: 1}}
		task, err := runtime.Render(d)
		if err != nil {
			t.Fatal(err)
		}
		p, err := compose.Load(context.Background(), task.Payload.(nodeapi.ComposeUp))
		if err != nil {
			t.Fatalf("model %q: the agent refuses the rendered project: %v", model, err)
		}
		s := p.Services["server"]
		if !slices.Contains(s.Command, model) {
			t.Errorf("model %q: the server runs %q", model, s.Command)
		}
		if got := s.Environment["GPUAAS_PARAMETERS"]; got == nil || *got != string(params) {
			t.Errorf("model %q: GPUAAS_PARAMETERS = %v, want %s", model, s.Environment.ToMapping()["GPUAAS_PARAMETERS"], params)
		}
	}
}
