// Package nodeapi is the wire contract between the control plane and the
// node agent: what a node reports (inventory, heartbeats, what runs), the
// typed tasks the server queues for it and the results it sends back. Both
// sides import these types; the JSON field names are the contract, so change
// them only additively.
//
// The agent always connects out to the API's one listener:
//
//	POST /api/v1/nodes/join                               JoinRequest → JoinResponse (bootstrap token, once)
//	POST /api/v1/nodes/token                              TokenRequest → TokenResponse (node-signed assertion)
//	POST /api/v1/nodes/{node_id}/heartbeat                Heartbeat → HeartbeatResponse
//	GET  /api/v1/nodes/{node_id}/tasks?wait_seconds=N     → TaskList (long poll; leases the tasks it returns)
//	POST /api/v1/nodes/{node_id}/tasks/{task_id}/result   TaskResult → 204
package nodeapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"
)

// Inventory is what a node is: host, container engine and accelerators.
type Inventory struct {
	Hostname      string `json:"hostname"`
	OS            string `json:"os"`
	Kernel        string `json:"kernel"`
	Arch          string `json:"arch"`
	CPUCores      int    `json:"cpu_cores"`
	MemoryMiB     int64  `json:"memory_mib"`
	DiskMiB       int64  `json:"disk_mib"`
	AgentVersion  string `json:"agent_version"`
	DockerVersion string `json:"docker_version,omitempty"` // engine version; empty when no engine answers
	DockerAPI     string `json:"docker_api_version,omitempty"`
	// NVIDIA stack; empty when the host has none.
	NVIDIADriver           string `json:"nvidia_driver_version,omitempty"`
	CUDAVersion            string `json:"cuda_version,omitempty"`
	NVIDIAContainerToolkit bool   `json:"nvidia_container_toolkit"`
	GPUs                   []GPU  `json:"gpus"`
	// Address is how operators reach the node's host-local endpoints
	// (for ssh -L tunnels); never used by the server to connect in.
	Address string `json:"address,omitempty"`
}

// Canonical returns the stored form of an inventory and its digest
// ("sha256:<hex>"). encoding/json writes struct fields in a fixed order, so
// equal inventories have equal digests on both sides of the wire: an agent
// sends its inventory in a heartbeat only when its digest differs from the
// one the server last answered with.
func (inv Inventory) Canonical() ([]byte, string, error) {
	if inv.GPUs == nil {
		inv.GPUs = []GPU{}
	}
	b, err := json.Marshal(inv)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(b)
	return b, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// GPU is one accelerator as the driver reports it.
type GPU struct {
	Index             int    `json:"index"`
	UUID              string `json:"uuid"`
	Model             string `json:"model"`  // e.g. "NVIDIA H100 80GB HBM3"
	Vendor            string `json:"vendor"` // "nvidia"
	MemoryMiB         int64  `json:"memory_mib"`
	PCIBusID          string `json:"pci_bus_id"`
	MIGMode           string `json:"mig_mode"` // "Enabled" | "Disabled" | "N/A"
	ComputeCapability string `json:"compute_capability,omitempty"`
}

// JoinRequest redeems a single-use bootstrap token. The agent generated its
// key pair locally; only the public key travels.
type JoinRequest struct {
	JoinToken    string    `json:"join_token"`
	Name         string    `json:"name"`
	PublicKeyPEM string    `json:"public_key_pem"` // Ed25519, PKIX PEM
	Inventory    Inventory `json:"inventory"`
}

// JoinResponse names the node the agent now is.
type JoinResponse struct {
	NodeID        string `json:"node_id"`
	KeyID         string `json:"key_id"`
	TokenURL      string `json:"token_url"` // audience of node assertions
	HeartbeatTTLS int    `json:"heartbeat_ttl_seconds"`
	// InventoryDigest is the digest of the inventory the server stored.
	InventoryDigest string `json:"inventory_digest,omitempty"`
}

// TokenRequest exchanges a JWT assertion signed by the node key (iss=sub=node
// id, aud=token URL, short exp, unique jti) for a short-lived access token.
type TokenRequest struct {
	Assertion string `json:"assertion"`
}

// TokenResponse is a node access token.
type TokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
}

// Heartbeat says the node is alive, what it is (only when it changed) and
// what gpuaas workloads really run on it.
type Heartbeat struct {
	Inventory *Inventory `json:"inventory,omitempty"`
	Workloads []Workload `json:"workloads"`
}

// HeartbeatResponse tells the agent how often to beat.
type HeartbeatResponse struct {
	State             string `json:"state"`
	HeartbeatTTLS     int    `json:"heartbeat_ttl_seconds"`
	HeartbeatInterval int    `json:"heartbeat_interval_seconds"`
	// InventoryDigest is the digest of the inventory the server holds; when
	// it differs from the agent's, the next heartbeat carries the inventory.
	InventoryDigest string `json:"inventory_digest,omitempty"`
}

// Workload is one gpuaas-labelled container (or Compose project) found on
// the node.
type Workload struct {
	InstanceID     string    `json:"instance_id,omitempty"`
	TaskID         string    `json:"task_id,omitempty"`
	ContainerID    string    `json:"container_id"`
	Name           string    `json:"name"`
	ComposeProject string    `json:"compose_project,omitempty"`
	State          string    `json:"state"` // docker state: running, exited, …
	StartedAt      time.Time `json:"started_at,omitzero"`
}

// Task kinds the agent executes.
const (
	KindImagePull       = "image.pull"
	KindContainerRun    = "container.run"
	KindContainerStop   = "container.stop"
	KindContainerRemove = "container.remove"
	KindComposeUp       = "compose.up"
	KindComposeDown     = "compose.down"
	KindWorkloadInspect = "workload.inspect"
	KindTeardownVerify  = "teardown.verify"
)

// Task is one unit of work queued for a node. Delivery is at least once;
// the agent must treat a repeated ID as the same task (idempotent).
type Task struct {
	ID          string          `json:"id"`
	NodeID      string          `json:"node_id"`
	Kind        string          `json:"kind"`
	InstanceID  string          `json:"instance_id,omitempty"`
	ProjectID   string          `json:"project_id,omitempty"`
	Attempt     int             `json:"attempt"`
	Payload     json.RawMessage `json:"payload"`
	CreatedAt   time.Time       `json:"created_at"`
	LeaseExpiry time.Time       `json:"lease_expires_at"`
}

// TaskList is what a task poll returns.
type TaskList struct {
	Tasks []Task `json:"tasks"`
}

// ImagePull pulls one image by digest with node-bound pull credentials.
// Credentials come from the artifacts' pull intent (unwrapped by the node).
type ImagePull struct {
	Repository    string `json:"repository"` // registry host/path, no tag
	Digest        string `json:"digest"`     // sha256:…; the pulled digest must equal it
	PullIntentID  string `json:"pull_intent_id,omitempty"`
	WrappingToken string `json:"wrapping_token,omitempty"` // unwrap with the node token; single use
}

// PortMapping publishes a container port on the node's host-local address.
type PortMapping struct {
	Container int    `json:"container"`
	Host      int    `json:"host"` // 0 = pick a free port
	Protocol  string `json:"protocol,omitempty"`
}

// Mount is a platform-owned file or scratch directory (never a user path).
type Mount struct {
	Kind     string `json:"kind"` // "file" (content written by the agent) | "scratch"
	Target   string `json:"target"`
	Content  []byte `json:"content,omitempty"` // for "file"; secrets travel only here
	Mode     uint32 `json:"mode,omitempty"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// Services names the Compose services the mount goes into (compose.up
	// only; the renderer must name at least one: a file is never mounted
	// into a service nobody chose). container.run ignores it.
	Services []string `json:"services,omitempty"`
}

// ContainerRun starts one container from an image pinned by digest.
type ContainerRun struct {
	Name  string    `json:"name"`
	Image ImagePull `json:"image"`
	// Command replaces the image's ENTRYPOINT and Args its CMD, as
	// Kubernetes' command and args do: with Command alone the image's CMD
	// is dropped; with Args alone the image's ENTRYPOINT runs them.
	Command   []string          `json:"command,omitempty"`
	Args      []string          `json:"args,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Ports     []PortMapping     `json:"ports,omitempty"`
	GPUUUIDs  []string          `json:"gpu_uuids,omitempty"` // none = no GPU device request
	CPUCores  float64           `json:"cpu_cores,omitempty"`
	MemoryMiB int64             `json:"memory_mib,omitempty"`
	Mounts    []Mount           `json:"mounts,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"` // extra gpuaas.* labels
	Readiness *Readiness        `json:"readiness,omitempty"`
}

// Readiness says when a workload is ready: a TCP or HTTP probe on a port.
type Readiness struct {
	Port           int    `json:"port"` // container port
	HTTPPath       string `json:"http_path,omitempty"`
	TimeoutSeconds int    `json:"timeout_seconds"`
}

// ContainerRef names a workload container by its instance or container id.
type ContainerRef struct {
	InstanceID  string `json:"instance_id,omitempty"`
	ContainerID string `json:"container_id,omitempty"`
	Name        string `json:"name,omitempty"`
	TimeoutSec  int    `json:"timeout_seconds,omitempty"` // graceful stop
}

// ComposeUp runs a platform-rendered Compose project.
type ComposeUp struct {
	Project   string            `json:"project"`
	YAML      []byte            `json:"yaml"` // rendered by the server, never user supplied
	Images    []ImagePull       `json:"images"`
	GPUUUIDs  []string          `json:"gpu_uuids,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Mounts    []Mount           `json:"mounts,omitempty"`
	Readiness *Readiness        `json:"readiness,omitempty"`
	Service   string            `json:"service,omitempty"` // the service readiness applies to
}

// ComposeDown removes a Compose project with its networks and volumes.
type ComposeDown struct {
	Project string `json:"project"`
}

// TeardownVerify asks the node to prove nothing labelled for an instance
// remains: containers, networks, volumes, scratch paths.
type TeardownVerify struct {
	InstanceID string `json:"instance_id"`
	// Names, when set, narrows the proof to these workloads (containers
	// by name) of the instance: a removed member's, while the rest of the
	// instance runs on.
	Names []string `json:"names,omitempty"`
}

// Task result states.
const (
	ResultSucceeded = "succeeded"
	ResultFailed    = "failed"
)

// Deterministic reason codes of failed tasks.
const (
	ReasonImagePullFailed   = "image_pull_failed"
	ReasonDigestMismatch    = "digest_mismatch"
	ReasonCredentialRefused = "credential_refused"
	ReasonContainerExited   = "container_exited"
	ReasonReadinessTimeout  = "readiness_timeout"
	ReasonInvalidTask       = "invalid_task"
	ReasonEngineUnavailable = "engine_unavailable"
	ReasonNotFound          = "not_found"
	ReasonResourcesRemain   = "resources_remain"
	ReasonInsufficientGPUs  = "insufficient_gpus"
	ReasonInternal          = "internal_error"
)

// TaskResult reports how a task ended.
type TaskResult struct {
	State      string          `json:"state"` // succeeded | failed
	ReasonCode string          `json:"reason_code,omitempty"`
	Message    string          `json:"message,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"` // kind-specific, e.g. RunOutput
	LogTail    []string        `json:"log_tail,omitempty"`
}

// RunOutput is what container.run / compose.up report on success.
type RunOutput struct {
	ContainerIDs []string      `json:"container_ids"`
	Ports        []PortMapping `json:"ports"` // host ports actually bound
	HostAddress  string        `json:"host_address"`
	ImageDigest  string        `json:"image_digest"`
	// ImageDigests are the repo digests of the images the started
	// containers were created from, read back from the engine: the server
	// compares them with the digests it pinned (digest_mismatch).
	ImageDigests []string `json:"image_digests,omitempty"`
}

// PinnedDigests returns the image digests a container.run or compose.up
// payload pins, sorted and distinct: what a node that ran it reports in
// RunOutput.ImageDigests.
func PinnedDigests(kind string, payload []byte) ([]string, error) {
	var images []ImagePull
	switch kind {
	case KindContainerRun:
		var r ContainerRun
		if err := json.Unmarshal(payload, &r); err != nil {
			return nil, err
		}
		images = []ImagePull{r.Image}
	case KindComposeUp:
		var u ComposeUp
		if err := json.Unmarshal(payload, &u); err != nil {
			return nil, err
		}
		images = u.Images
	}
	out := make([]string, 0, len(images))
	for _, im := range images {
		out = append(out, im.Digest)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// VerifyOutput is what teardown.verify reports.
type VerifyOutput struct {
	Remaining []string `json:"remaining"` // what still exists; empty = clean
}

// Ownership labels every gpuaas workload carries; the agent never touches a
// container without LabelManaged.
const (
	LabelManaged  = "gpuaas.managed"
	LabelInstance = "gpuaas.instance_id"
	LabelTask     = "gpuaas.task_id"
	LabelProject  = "gpuaas.project_id"
	LabelNode     = "gpuaas.node_id"
	LabelOrg      = "gpuaas.org_id"
	LabelApp      = "gpuaas.app_slug"
	LabelVersion  = "gpuaas.app_version"
	// LabelMember marks the containers of a member added to an instance.
	LabelMember = "gpuaas.member_id"
)
