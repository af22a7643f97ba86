package runtime

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/manifest"
)

// renderers are the curated Compose renderers, by the name a manifest's
// runtime_profile.renderer gives. Adding one is a platform change, reviewed
// like code, never an app team's input.
var renderers = map[string]func(Deployment, []string) (nodeapi.ComposeUp, error){
	"vllm_openai": renderVLLMOpenAI,
}

// Renderers lists the curated renderer names.
func Renderers() []string {
	out := make([]string, 0, len(renderers))
	for n := range renderers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// The Compose document shapes the renderer emits: only the keys the
// platform uses, so nothing else can slip in.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Networks map[string]composeNetwork `yaml:"networks"`
	Volumes  map[string]composeVolume  `yaml:"volumes,omitempty"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command,omitempty"`
	Environment map[string]string `yaml:"environment,omitempty"`
	Ports       []string          `yaml:"ports,omitempty"`
	Volumes     []string          `yaml:"volumes,omitempty"`
	Labels      map[string]string `yaml:"labels"`
	Networks    []string          `yaml:"networks"`
	ShmSize     string            `yaml:"shm_size,omitempty"`
	CPUs        float64           `yaml:"cpus,omitempty"`
	MemLimit    string            `yaml:"mem_limit,omitempty"`
	Deploy      *composeDeploy    `yaml:"deploy,omitempty"`
	Restart     string            `yaml:"restart"`
	ReadOnly    bool              `yaml:"read_only,omitempty"`
}

type composeDeploy struct {
	Resources struct {
		Reservations struct {
			Devices []composeDevice `yaml:"devices"`
		} `yaml:"reservations"`
	} `yaml:"resources"`
}

type composeDevice struct {
	Driver       string   `yaml:"driver"`
	DeviceIDs    []string `yaml:"device_ids"`
	Capabilities []string `yaml:"capabilities"`
}

type composeNetwork struct {
	Labels map[string]string `yaml:"labels"`
}

type composeVolume struct {
	Labels map[string]string `yaml:"labels"`
}

// vllmParams are the launch parameters the vllm_openai renderer reads; the
// version's parameter schema has validated them already.
type vllmParams struct {
	Model                string   `json:"model"`
	MaxModelLen          *int     `json:"max_model_len"`
	GPUMemoryUtilization *float64 `json:"gpu_memory_utilization"`
}

// vllmServerPort is where the vLLM OpenAI-compatible server listens inside
// its container (its image's default).
const vllmServerPort = 8000

// renderVLLMOpenAI renders the vLLM OpenAI-compatible server as a Compose
// project: the primary service runs `vllm serve`-style arguments on the
// allocation's GPUs and publishes its OpenAI endpoint on a host-local port;
// sidecars named by the topology run beside it on a private network with no
// published port. Model cache mounts become project volumes (removed with
// the project); shared-memory mounts become shm_size. The identity key file
// reaches the primary service only (the workload the instance is), as a
// read-only file the agent writes; sidecars get no credentials.
func renderVLLMOpenAI(d Deployment, gpus []string) (nodeapi.ComposeUp, error) {
	topo := d.Profile.Topology
	if topo == nil || len(topo.Services) == 0 {
		return nodeapi.ComposeUp{}, fmt.Errorf("vllm_openai needs a topology with a primary service")
	}
	var params vllmParams
	if len(d.Parameters) > 0 {
		if err := json.Unmarshal(d.Parameters, &params); err != nil {
			return nodeapi.ComposeUp{}, fmt.Errorf("vllm_openai parameters: %w", err)
		}
	}
	if params.Model == "" {
		return nodeapi.ComposeUp{}, fmt.Errorf("vllm_openai needs parameters.model")
	}
	labels := Labels(d)
	f := composeFile{Name: d.Name, Services: map[string]composeService{},
		Networks: map[string]composeNetwork{"default": {Labels: labels}}}
	up := nodeapi.ComposeUp{Project: d.Name, GPUUUIDs: gpus, Env: env(d), Mounts: identityMounts(d)}
	primary := ""
	seen := map[string]bool{}
	for _, s := range topo.Services {
		img, ok := d.Images[s.Artifact]
		if !ok || img.Digest == "" {
			return nodeapi.ComposeUp{}, fmt.Errorf("service %s: artifact %s has no verified digest", s.Name, s.Artifact)
		}
		if !seen[img.Repository+"@"+img.Digest] {
			seen[img.Repository+"@"+img.Digest] = true
			up.Images = append(up.Images, img)
		}
		svc := composeService{Image: img.Repository + "@" + img.Digest, Environment: env(d), Labels: labels,
			Networks: []string{"default"}, Restart: "no"}
		// Every service, a sidecar as well as the server, runs inside the
		// instance's CPU and memory: a sidecar left unlimited could take
		// the cores and memory of the node other allocations share.
		svc.CPUs = float64(d.Resources.CPUCores)
		if d.Resources.MemoryGiB > 0 {
			svc.MemLimit = fmt.Sprintf("%dg", d.Resources.MemoryGiB)
		}
		delete(svc.Environment, "GPUAAS_IDENTITY_FILE") // the primary's alone, below
		if s.Role == "primary" {
			if primary != "" {
				return nodeapi.ComposeUp{}, fmt.Errorf("vllm_openai takes one primary service, found %s and %s", primary, s.Name)
			}
			primary = s.Name
			if d.Identity != nil {
				svc.Environment["GPUAAS_IDENTITY_FILE"] = IdentityPath
			}
			svc.Command = vllmArgs(params)
			if s.GPU && len(gpus) > 0 {
				dep := &composeDeploy{}
				dep.Resources.Reservations.Devices = []composeDevice{{Driver: "nvidia", DeviceIDs: gpus, Capabilities: []string{"gpu"}}}
				svc.Deploy = dep
			}
		}
		f.Services[s.Name] = svc
	}
	if primary == "" {
		return nodeapi.ComposeUp{}, fmt.Errorf("vllm_openai needs a service with role primary")
	}
	for i := range up.Mounts {
		up.Mounts[i].Services = []string{primary}
	}
	for _, m := range topo.Mounts {
		svc, ok := f.Services[m.Service]
		if !ok {
			return nodeapi.ComposeUp{}, fmt.Errorf("mount %s names unknown service %s", m.Name, m.Service)
		}
		switch m.Source {
		case "shared_memory":
			svc.ShmSize = "8gb"
		default: // model_cache and other platform-managed volumes
			if f.Volumes == nil {
				f.Volumes = map[string]composeVolume{}
			}
			f.Volumes[m.Name] = composeVolume{Labels: labels}
			spec := m.Name + ":" + m.Target
			if m.ReadOnly {
				spec += ":ro"
			}
			svc.Volumes = append(svc.Volumes, spec)
		}
		f.Services[m.Service] = svc
	}
	port := vllmServerPort
	for _, e := range topo.Endpoints {
		if e.Expose != manifest.ExposePrivateHostLocal {
			continue
		}
		svc, ok := f.Services[e.Service]
		if !ok {
			return nodeapi.ComposeUp{}, fmt.Errorf("endpoint %s names unknown service %s", e.Name, e.Service)
		}
		// Host-local only: bound on the node's loopback, reached through an
		// ssh tunnel, never on a public interface.
		hp := ""
		if h := hostPort(d); h > 0 && e.Service == primary {
			hp = itoa(h)
		}
		svc.Ports = append(svc.Ports, "127.0.0.1:"+hp+":"+itoa(e.Port))
		f.Services[e.Service] = svc
		if e.Service == primary {
			port = e.Port
		}
	}
	y, err := literalYAML(f)
	if err != nil {
		return nodeapi.ComposeUp{}, err
	}
	up.YAML, up.Service, up.Readiness = y, primary, readiness(d, port)
	return up, nil
}

// literalYAML encodes a rendered Compose document with every value taken
// literally. The agent loads it as Compose does, which interpolates
// `$NAME` and `${…}` in values: a launch parameter holding a `$` would
// otherwise reach the workload altered (a variable of the task's
// environment substituted into it) or fail the load (`${X:?…}`). What the
// platform renders never refers to a variable, so each `$` is written as
// Compose's escape, `$$`.
func literalYAML(v any) ([]byte, error) {
	var doc yaml.Node
	if err := doc.Encode(v); err != nil {
		return nil, err
	}
	escapeValues(&doc)
	return yaml.Marshal(&doc)
}

// escapeValues escapes `$` in every scalar value under n (mapping keys are
// not interpolated, so they are left as they are).
func escapeValues(n *yaml.Node) {
	switch n.Kind {
	case yaml.ScalarNode:
		n.Value = strings.ReplaceAll(n.Value, "$", "$$")
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			escapeValues(n.Content[i])
		}
	default:
		for _, c := range n.Content {
			escapeValues(c)
		}
	}
}

// vllmArgs are the arguments of the vLLM OpenAI server entrypoint.
func vllmArgs(p vllmParams) []string {
	args := []string{"--model", p.Model, "--served-model-name", p.Model, "--host", "0.0.0.0", "--port", itoa(vllmServerPort)}
	if p.MaxModelLen != nil {
		args = append(args, "--max-model-len", itoa(*p.MaxModelLen))
	}
	if p.GPUMemoryUtilization != nil {
		args = append(args, "--gpu-memory-utilization", fmt.Sprintf("%g", *p.GPUMemoryUtilization))
	}
	return args
}
