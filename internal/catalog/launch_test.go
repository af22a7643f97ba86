package catalog

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/manifest"
)

func exampleVersion(t testing.TB, file string) manifest.Version {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "manifests", file))
	if err != nil {
		t.Fatal(err)
	}
	pkg, problems, err := manifest.Parse(data, file)
	if err != nil || len(problems) > 0 {
		t.Fatalf("parse %s: %v %v", file, err, problems)
	}
	return pkg.Versions[0]
}

func intp(i int) *int { return &i }

func TestResolveLaunchDefaults(t *testing.T) {
	t.Parallel()
	v := exampleVersion(t, "jupyter-cuda-dev.json")
	eff, errs := ResolveLaunch(v, EntitlementOverrides{}, LaunchRequest{})
	if len(errs) > 0 {
		t.Fatalf("unexpected errors: %v", errs)
	}
	want := Effective{
		Version: "1.4.2", RuntimeBackend: "launchable_oci",
		OperatingMode: "tenant_dedicated", ControlPlaneScope: "project", TenantBoundaryMode: BoundaryProjectIsolated,
		Resources: EffectiveResources{GPUCount: 1, CPUCores: 8, MemoryGiB: 32, HostPort: 18888},
	}
	if eff.Version != want.Version || eff.RuntimeBackend != want.RuntimeBackend || eff.OperatingMode != want.OperatingMode ||
		eff.ControlPlaneScope != want.ControlPlaneScope || eff.TenantBoundaryMode != want.TenantBoundaryMode || eff.Resources != want.Resources {
		t.Errorf("effective = %+v, want %+v", eff, want)
	}
	if got := string(eff.Parameters); got != `{"notebook_dir":"/home/jovyan/work","pip_packages":[]}` {
		t.Errorf("parameters with defaults = %s", got)
	}
	if got := string(eff.Config); got != `{"idle_shutdown_minutes":120}` {
		t.Errorf("config with defaults = %s", got)
	}
}

func TestResolveLaunchErrors(t *testing.T) {
	t.Parallel()
	jupyter := exampleVersion(t, "jupyter-cuda-dev.json")
	slurm := exampleVersion(t, "slurm-reference.yaml")
	vllm := exampleVersion(t, "vllm-openai-compose.yaml")
	cases := []struct {
		name      string
		version   manifest.Version
		overrides EntitlementOverrides
		req       LaunchRequest
		field     string
		code      string
	}{
		{"gpu above max", jupyter, EntitlementOverrides{}, LaunchRequest{Resources: ResourceRequest{GPUCount: intp(9)}}, "/resources/gpu_count", CodeOutOfRange},
		{"gpu below compatibility minimum", jupyter, EntitlementOverrides{}, LaunchRequest{Resources: ResourceRequest{GPUCount: intp(0)}}, "/resources/gpu_count", CodeOutOfRange},
		{"cpu below folded min_vcpu", jupyter, EntitlementOverrides{}, LaunchRequest{Resources: ResourceRequest{CPUCores: intp(2)}}, "/resources/cpu_cores", CodeOutOfRange},
		{"memory above max", jupyter, EntitlementOverrides{}, LaunchRequest{Resources: ResourceRequest{MemoryGiB: intp(4096)}}, "/resources/memory_gib", CodeOutOfRange},
		{"privileged host port", jupyter, EntitlementOverrides{}, LaunchRequest{Resources: ResourceRequest{HostPort: intp(80)}}, "/resources/host_port", CodeOutOfRange},
		{"host port outside profile range", jupyter, EntitlementOverrides{}, LaunchRequest{Resources: ResourceRequest{HostPort: intp(20000)}}, "/resources/host_port", CodeOutOfRange},
		{"resources on a profile-less version", slurm, EntitlementOverrides{}, LaunchRequest{Resources: ResourceRequest{CPUCores: intp(4)}}, "/resources/cpu_cores", CodeNotSupported},
		{"unknown mode", jupyter, EntitlementOverrides{}, LaunchRequest{OperatingMode: "shared"}, "/operating_mode", CodeInvalid},
		{"mode unsupported by manifest", jupyter, EntitlementOverrides{}, LaunchRequest{OperatingMode: "platform_managed"}, "/operating_mode", CodeNotSupported},
		{"scope not entitled", slurm, EntitlementOverrides{AllowedControlPlaneScopes: []string{"project"}}, LaunchRequest{ControlPlaneScope: "tenant"}, "/control_plane_scope", CodeNotEntitled},
		{"nothing entitled", slurm, EntitlementOverrides{AllowedOperatingModes: []string{"platform_managed"}}, LaunchRequest{}, "/operating_mode", CodeNotEntitled},
		{"version not entitled", jupyter, EntitlementOverrides{AllowedVersions: []string{"1.4.1"}}, LaunchRequest{}, "/version", CodeNotEntitled},
		{"config against schema", jupyter, EntitlementOverrides{}, LaunchRequest{Config: json.RawMessage(`{"idle_shutdown_minutes": -1}`)}, "/config/idle_shutdown_minutes", CodeSchemaViolation},
		{"config unknown key", jupyter, EntitlementOverrides{}, LaunchRequest{Config: json.RawMessage(`{"x": 1}`)}, "/config/x", CodeSchemaViolation},
		{"config invalid json", jupyter, EntitlementOverrides{}, LaunchRequest{Config: json.RawMessage(`{`)}, "/config", CodeInvalid},
		{"placement missing controller", slurm, EntitlementOverrides{}, LaunchRequest{PlacementIntent: json.RawMessage(`{"worker_allocation_ids": []}`)}, "/placement_intent/controller_allocation_ids", CodeSchemaViolation},
		{"placement without schema", jupyter, EntitlementOverrides{}, LaunchRequest{PlacementIntent: json.RawMessage(`{"a": 1}`)}, "/placement_intent", CodeNotSupported},
		{"parameter required", vllm, EntitlementOverrides{}, LaunchRequest{}, "/parameters/model", CodeSchemaViolation},
		{"parameter bound", vllm, EntitlementOverrides{}, LaunchRequest{Parameters: json.RawMessage(`{"model": "a/b", "max_model_len": 10}`)}, "/parameters/max_model_len", CodeSchemaViolation},
		{"pip direct reference", jupyter, EntitlementOverrides{}, LaunchRequest{Parameters: json.RawMessage(`{"pip_packages": ["numpy", "evil @ https://x.example.com/e.whl"]}`)}, "/parameters/pip_packages/1", CodeInvalidRequirement},
		{"pip shell injection", jupyter, EntitlementOverrides{}, LaunchRequest{Parameters: json.RawMessage(`{"pip_packages": ["numpy; rm -rf /"]}`)}, "/parameters/pip_packages/0", CodeInvalidRequirement},
		{"pip duplicate", jupyter, EntitlementOverrides{}, LaunchRequest{Parameters: json.RawMessage(`{"pip_packages": ["Foo_Bar>=1", "foo-bar<3"]}`)}, "/parameters/pip_packages/1", CodeDuplicate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, errs := ResolveLaunch(tc.version, tc.overrides, tc.req)
			for _, e := range errs {
				if e.Field == tc.field && e.Code == tc.code {
					if e.Message == "" {
						t.Error("empty message")
					}
					return
				}
			}
			t.Errorf("want %s %s; got %+v", tc.field, tc.code, errs)
		})
	}
}

func TestResolveLaunchModes(t *testing.T) {
	t.Parallel()
	slurm := exampleVersion(t, "slurm-reference.yaml")
	placement := json.RawMessage(`{"controller_allocation_ids": ["a1"]}`)
	eff, errs := ResolveLaunch(slurm, EntitlementOverrides{}, LaunchRequest{ControlPlaneScope: "tenant", PlacementIntent: placement})
	if len(errs) > 0 || eff.ControlPlaneScope != "tenant" || eff.TenantBoundaryMode != BoundaryTenantShared {
		t.Errorf("tenant hint: %+v %v", eff, errs)
	}
	// The entitlement narrows to tenant only: the default (project) is not
	// allowed, so the server picks the first allowed scope.
	eff, errs = ResolveLaunch(slurm, EntitlementOverrides{AllowedControlPlaneScopes: []string{"tenant"}}, LaunchRequest{PlacementIntent: placement})
	if len(errs) > 0 || eff.ControlPlaneScope != "tenant" || eff.Resources.GPUCount != 0 {
		t.Errorf("narrowed: %+v %v", eff, errs)
	}
	v := slurm
	v.SupportedModes = manifest.SupportedModes{OperatingModes: []string{"tenant_dedicated", "platform_managed"}, ControlPlaneScopes: []string{"project", "platform"}}
	eff, errs = ResolveLaunch(v, EntitlementOverrides{}, LaunchRequest{OperatingMode: "platform_managed"})
	if eff.ControlPlaneScope != "platform" || eff.TenantBoundaryMode != BoundaryPlatformShared {
		t.Errorf("platform_managed: %+v %v", eff, errs)
	}
	_, errs = ResolveLaunch(v, EntitlementOverrides{}, LaunchRequest{OperatingMode: "platform_managed", ControlPlaneScope: "project"})
	if len(errs) == 0 || errs[0].Field != "/control_plane_scope" {
		t.Errorf("mismatched pair: %v", errs)
	}
}

func TestResolveLaunchAcceptsValidInput(t *testing.T) {
	t.Parallel()
	v := exampleVersion(t, "jupyter-cuda-dev.json")
	eff, errs := ResolveLaunch(v, EntitlementOverrides{AllowedVersions: []string{"1.4.2"}}, LaunchRequest{
		Resources:  ResourceRequest{GPUCount: intp(2), CPUCores: intp(16), MemoryGiB: intp(64), HostPort: intp(18100)},
		Parameters: json.RawMessage(`{"pip_packages": ["numpy>=1.26", "torch==2.3.*; platform_machine == 'x86_64'"]}`),
	})
	if len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	if eff.Resources != (EffectiveResources{GPUCount: 2, CPUCores: 16, MemoryGiB: 64, HostPort: 18100}) {
		t.Errorf("resources %+v", eff.Resources)
	}
}

// JSON Schema's integer accepts whole numbers however they are spelled
// (4096.0, 4.096e3); the effective parameters spell them as integers,
// which the renderers decode into Go ints (they refused 4096.0, so a
// launch that passed validation failed at deploy).
func TestResolveLaunchWritesWholeNumbersAsIntegers(t *testing.T) {
	t.Parallel()
	vllm := exampleVersion(t, "vllm-openai-compose.yaml")
	for _, n := range []string{"4096.0", "4.096e3", "409600e-2"} {
		eff, errs := ResolveLaunch(vllm, EntitlementOverrides{}, LaunchRequest{Parameters: json.RawMessage(`{"model": "a/b", "gpu_memory_utilization": 9e-1, "max_model_len": ` + n + `}`)})
		if len(errs) > 0 {
			t.Fatalf("%s: %v", n, errs)
		}
		var p struct {
			MaxModelLen          int     `json:"max_model_len"`
			GPUMemoryUtilization float64 `json:"gpu_memory_utilization"`
		}
		if err := json.Unmarshal(eff.Parameters, &p); err != nil || p.MaxModelLen != 4096 || p.GPUMemoryUtilization != 0.9 {
			t.Errorf("%s: %s decodes to %+v (%v)", n, eff.Parameters, p, err)
		}
	}
}

// A number the schema validator cannot hold is a field error at its
// pointer, not a crash of the launch (the validator dereferenced nil on
// 1e-99999999: a 500 for anyone who may launch, preview included).
func TestResolveLaunchRefusesNumbersOutOfRange(t *testing.T) {
	t.Parallel()
	vllm := exampleVersion(t, "vllm-openai-compose.yaml")
	for _, n := range []string{"1e-99999999", "1e99999999"} {
		_, errs := ResolveLaunch(vllm, EntitlementOverrides{}, LaunchRequest{Parameters: json.RawMessage(`{"model": "a/b", "gpu_memory_utilization": ` + n + `}`)})
		if len(errs) != 1 || errs[0].Field != "/parameters/gpu_memory_utilization" || !strings.Contains(errs[0].Message, "out of range") {
			t.Errorf("%s: %+v, want one out-of-range error at /parameters/gpu_memory_utilization", n, errs)
		}
	}
}
