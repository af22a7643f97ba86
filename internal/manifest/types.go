package manifest

import "encoding/json"

// Package is the canonical form of an app manifest package, whichever of
// the accepted spellings it was written in. Its JSON encoding is the nested
// {app, versions} form.
type Package struct {
	App      App       `json:"app"`
	Versions []Version `json:"versions"`
}

// Version returns the version with the given version string.
func (p *Package) Version(v string) (Version, bool) {
	for _, ver := range p.Versions {
		if ver.Version == v {
			return ver, true
		}
	}
	return Version{}, false
}

// Runtime backends an app or version may declare.
const (
	BackendK8s           = "k8s"
	BackendSlurm         = "slurm"
	BackendRay           = "ray"
	BackendBareMetal     = "bare_metal"
	BackendLaunchableOCI = "launchable_oci"
	BackendDockerCompose = "docker_compose"
)

// Runtime profile kinds. Each names the backend that executes it.
const (
	ProfileLaunchableOCI = "launchable_oci"
	ProfileDockerCompose = "docker_compose"
)

// Operating modes and control-plane scopes.
const (
	ModeTenantDedicated = "tenant_dedicated"
	ModePlatformManaged = "platform_managed"

	ScopeProject  = "project"
	ScopeTenant   = "tenant"
	ScopePlatform = "platform"
)

// Port exposure policies.
const (
	ExposeEmbeddedUIGateway = "embedded_ui_gateway"
	ExposePrivateHostLocal  = "private_host_local"
	ExposeNone              = "none"
)

// App is the version-independent part of a package.
type App struct {
	Slug           string         `json:"slug"`
	DisplayName    string         `json:"display_name"`
	Description    string         `json:"description,omitempty"`
	Category       string         `json:"category,omitempty"`
	RuntimeBackend string         `json:"runtime_backend"`
	SupportedModes SupportedModes `json:"supported_modes"`
	UI             *UI            `json:"ui,omitempty"`

	source string // JSON pointer of the app fields in the submitted document
}

// SupportedModes lists the operating modes and control-plane scopes an app
// (or one version of it) can run in. After Parse both lists are non-empty.
type SupportedModes struct {
	OperatingModes     []string `json:"operating_modes,omitempty"`
	ControlPlaneScopes []string `json:"control_plane_scopes,omitempty"`
}

// UI says whether the platform shell renders the app from metadata alone or
// embeds the app's own UI through the platform gateway at Path.
type UI struct {
	ExtensionKind string `json:"extension_kind"`
	Path          string `json:"path,omitempty"`
}

// Version is one registrable version of an app. App-level defaults
// (runtime backend, supported modes, UI) have been applied, so a Version is
// self-contained: the server stores it, digests it and launches from it.
type Version struct {
	Version                string                  `json:"version"`
	RuntimeBackend         string                  `json:"runtime_backend"`
	SupportedModes         SupportedModes          `json:"supported_modes"`
	ArtifactKind           string                  `json:"artifact_kind,omitempty"`
	ArtifactRef            string                  `json:"artifact_ref,omitempty"`
	Compatibility          *Compatibility          `json:"compatibility,omitempty"`
	RuntimeProfile         *RuntimeProfile         `json:"runtime_profile,omitempty"`
	PlacementSchema        json.RawMessage         `json:"placement_schema,omitempty"`
	ConfigSchema           json.RawMessage         `json:"config_schema,omitempty"`
	RuntimeRequirements    *RuntimeRequirements    `json:"runtime_requirements,omitempty"`
	Artifacts              []Artifact              `json:"artifacts,omitempty"`
	ExternalWorkerContract *ExternalWorkerContract `json:"external_worker_contract,omitempty"`
	Metering               *Metering               `json:"metering,omitempty"`
	UI                     *UI                     `json:"ui,omitempty"`

	source string // JSON pointer of this version in the submitted document
}

// Compatibility decides which allocations can run the version.
type Compatibility struct {
	RequiresCapacityShape []string `json:"requires_capacity_shape,omitempty"`
	MinGPUCount           int      `json:"min_gpu_count,omitempty"`
	RequiresExclusiveNode bool     `json:"requires_exclusive_node,omitempty"`
	SupportedAccelerators []string `json:"supported_accelerators,omitempty"`
}

// RuntimeRequirements names the credentials and identity the runtime needs.
type RuntimeRequirements struct {
	BootstrapAccessCredential string   `json:"bootstrap_access_credential,omitempty"`
	OperatorIdentity          string   `json:"operator_identity,omitempty"`
	CredentialClasses         []string `json:"credential_classes,omitempty"`
}

// Artifact is one artifact the version expects to be registered. The
// trusted digest lives in the artifact registry; Digest here is optional.
type Artifact struct {
	Name         string `json:"name"`
	ArtifactKind string `json:"artifact_kind"`
	SourceType   string `json:"source_type"`
	Repository   string `json:"repository,omitempty"`
	Digest       string `json:"digest,omitempty"`
}

// ExternalWorkerContract tells an external app worker which root component
// and child operation to poll and report through.
type ExternalWorkerContract struct {
	Delivery       string                `json:"delivery"`
	Root           WorkerRoot            `json:"root"`
	ChildOperation *WorkerChildOperation `json:"child_operation,omitempty"`
}

// WorkerRoot is the root component of an external worker contract.
type WorkerRoot struct {
	ComponentKey    string `json:"component_key"`
	AllocationIDKey string `json:"allocation_id_key"`
	RequestedPhase  string `json:"requested_phase,omitempty"`
	BoundPhase      string `json:"bound_phase,omitempty"`
}

// WorkerChildOperation is the fan-out component of an external worker contract.
type WorkerChildOperation struct {
	ComponentKey     string `json:"component_key"`
	AllocationIDsKey string `json:"allocation_ids_key"`
}

// Metering names the app-level usage dimension the runtime reports.
type Metering struct {
	Kind string `json:"kind"`
}

// RuntimeProfile is how the node agent runs the version. Kind selects which
// fields apply: launchable_oci uses ImageRef, Command, Args, Env and Ports;
// docker_compose uses Renderer and Topology. Both use Resources, Readiness
// and Parameters.
type RuntimeProfile struct {
	Kind       string          `json:"kind"`
	ImageRef   string          `json:"image_ref,omitempty"`
	Command    []string        `json:"command,omitempty"` // replaces the image's ENTRYPOINT
	Args       []string        `json:"args,omitempty"`    // replaces the image's CMD
	Env        []EnvVar        `json:"env,omitempty"`
	Ports      []Port          `json:"ports,omitempty"`
	Renderer   string          `json:"renderer,omitempty"`
	Topology   *Topology       `json:"topology,omitempty"`
	Resources  *Resources      `json:"resources,omitempty"`
	Readiness  *Readiness      `json:"readiness,omitempty"`
	Health     *Health         `json:"health,omitempty"`
	Members    *Members        `json:"members,omitempty"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// Members says which members operators may add to a running instance of a
// launchable_oci version (a cluster app: a controller and its workers).
// Each member runs the version's image on an allocation of its own, told
// its role and name; without it a version runs as one workload.
type Members struct {
	// Roles are the roles a member may have (worker, head, node,
	// controller).
	Roles []string `json:"roles"`
	// MaxCount bounds the members one instance may have at once.
	MaxCount int `json:"max_count,omitempty"`
}

// Health is what the workload promises to report while it runs.
type Health struct {
	// HeartbeatTimeoutSeconds: a running instance whose workload sent no
	// heartbeat for this long is degraded (0: heartbeats are optional).
	HeartbeatTimeoutSeconds int `json:"heartbeat_timeout_seconds,omitempty"`
}

// EnvVar is a fixed, non-secret environment variable of the container.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Port is a container port and how the platform exposes it.
type Port struct {
	Container int    `json:"container"`
	Expose    string `json:"expose"`
	Name      string `json:"name,omitempty"`
}

// Bounds is a launch-time resource input: the value used when the launch
// request says nothing, and the range a request may choose from. A nil
// field is unset.
type Bounds struct {
	Default *int `json:"default,omitempty"`
	Min     *int `json:"min,omitempty"`
	Max     *int `json:"max,omitempty"`
}

// Resources holds the launch-time resource inputs. The seed spellings
// min_memory_mib and min_vcpu are folded into MemoryGiB.Min and CPUCores.Min
// by Parse, so after parsing MinMemoryMiB and MinVCPU are zero.
type Resources struct {
	GPUCount     *Bounds `json:"gpu_count,omitempty"`
	CPUCores     *Bounds `json:"cpu_cores,omitempty"`
	MemoryGiB    *Bounds `json:"memory_gib,omitempty"`
	HostPort     *Bounds `json:"host_port,omitempty"`
	MinMemoryMiB int     `json:"min_memory_mib,omitempty"`
	MinVCPU      int     `json:"min_vcpu,omitempty"`
}

// ReadinessStartCompleted is the readiness type by which the workload
// itself says it started: it posts a start_completed runtime event, and the
// platform probes nothing.
const ReadinessStartCompleted = "start_completed"

// Readiness decides when an instance is running: a probe the node agent
// runs (http, tcp), or the workload's own start_completed event.
type Readiness struct {
	Type                string `json:"type"`
	Path                string `json:"path,omitempty"`
	Port                int    `json:"port,omitempty"`
	InitialDelaySeconds int    `json:"initial_delay_seconds,omitempty"`
	PeriodSeconds       int    `json:"period_seconds,omitempty"`
	TimeoutSeconds      int    `json:"timeout_seconds,omitempty"`
	FailureThreshold    int    `json:"failure_threshold,omitempty"`
}

// Topology is the logical shape of a curated Compose project; the renderer
// turns it into concrete Compose YAML.
type Topology struct {
	Services  []Service  `json:"services"`
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	Mounts    []Mount    `json:"mounts,omitempty"`
}

// Service is one Compose service, run from a named artifact of the version.
type Service struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	Artifact string `json:"artifact"`
	GPU      bool   `json:"gpu,omitempty"`
}

// Endpoint is a service port the platform exposes.
type Endpoint struct {
	Name     string `json:"name"`
	Service  string `json:"service"`
	Port     int    `json:"port"`
	Expose   string `json:"expose"`
	Protocol string `json:"protocol,omitempty"`
}

// Mount attaches a platform-managed storage source to a service.
type Mount struct {
	Name     string `json:"name"`
	Service  string `json:"service"`
	Target   string `json:"target"`
	Source   string `json:"source"`
	ReadOnly bool   `json:"read_only,omitempty"`
}
