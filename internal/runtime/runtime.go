// Package runtime renders an app version's runtime profile into the typed
// node tasks of client/nodeapi: one container.run for launchable_oci, a
// compose.up built by a platform-owned curated renderer for docker_compose.
// Everything that reaches a node comes from the server's own data — the
// version's verified artifacts (by digest), the effective launch values and
// the endpoint policy; clients never supply Compose YAML, image tags, host
// paths, credentials or secrets.
package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/manifest"
)

// IdentityPath is where the workload finds its service-account key file.
const IdentityPath = "/var/run/gpuaas/identity.json"

// DefaultReadinessTimeoutSeconds bounds how long a deploy waits for the
// workload to become ready when the profile does not say.
const DefaultReadinessTimeoutSeconds = 120

// Identity is the instance's own service account as the workload receives
// it: a key file mounted read-only at IdentityPath.
type Identity struct {
	ServiceAccountID string `json:"service_account_id"`
	ProjectID        string `json:"project_id"`
	KeyID            string `json:"key_id"`
	Algorithm        string `json:"algorithm,omitempty"`
	PrivateKeyPEM    string `json:"private_key_pem"`
	TokenURL         string `json:"token_url"`
	APIBaseURL       string `json:"api_base_url"`
}

// keyFile is the file content: the CLI's service-account key file format
// plus the API base URL, so any gpuaas client library can load it.
func (id Identity) keyFile() []byte {
	b, _ := json.Marshal(struct {
		Type string `json:"type"`
		Identity
	}{Type: "gpuaas_service_account_key", Identity: id})
	return b
}

// Deployment is everything a render needs: who, what (pinned artifacts),
// where (the allocation's GPUs) and with which effective launch values.
type Deployment struct {
	InstanceID string
	ProjectID  string
	OrgID      string
	NodeID     string
	AppSlug    string
	Version    string
	// Name names the workload: the container, or the Compose project.
	Name    string
	Profile *manifest.RuntimeProfile
	// Images are the version's artifacts by name, each pinned by digest.
	// A launchable_oci profile's image is under LaunchImage.
	Images     map[string]nodeapi.ImagePull
	Resources  catalog.EffectiveResources
	Parameters json.RawMessage
	// GPUUUIDs are the allocation's GPUs; the render takes GPUCount of them.
	GPUUUIDs []string
	// HostPort pins the host port (0: the node picks; effective
	// resources' host_port wins when set).
	HostPort int
	Identity *Identity
	// ReadinessTimeoutSeconds overrides the profile-derived deploy timeout.
	ReadinessTimeoutSeconds int
	// UIBasePath is the path the UI gateway serves the app's UI under
	// (path mode), handed to the app as GPUAAS_UI_BASE_PATH; "" when the
	// UI has its own origin.
	UIBasePath string
	// Member is set when the workload is a member added to the instance
	// (a worker of a cluster app); nil for the instance's own deployment.
	Member *Member
}

// Member is who an added member is: the workload learns it from
// GPUAAS_MEMBER_ID, GPUAAS_MEMBER_NAME and GPUAAS_MEMBER_ROLE, and its
// containers carry the member label.
type Member struct {
	ID, Name, Role string
}

// LaunchImage is the Images key of a launchable_oci profile's image.
const LaunchImage = ""

// Task is one rendered node task.
type Task struct {
	Kind    string
	Payload any
}

// Render turns a deployment into the task that starts it.
func Render(d Deployment) (Task, error) {
	if d.Profile == nil {
		return Task{}, fmt.Errorf("version %s has no runtime profile", d.Version)
	}
	gpus, err := pickGPUs(d.GPUUUIDs, d.Resources.GPUCount)
	if err != nil {
		return Task{}, err
	}
	switch d.Profile.Kind {
	case manifest.ProfileLaunchableOCI:
		run, err := renderContainer(d, gpus)
		return Task{Kind: nodeapi.KindContainerRun, Payload: run}, err
	case manifest.ProfileDockerCompose:
		r, ok := renderers[d.Profile.Renderer]
		if !ok {
			return Task{}, fmt.Errorf("no curated Compose renderer %q", d.Profile.Renderer)
		}
		up, err := r(d, gpus)
		return Task{Kind: nodeapi.KindComposeUp, Payload: up}, err
	}
	return Task{}, fmt.Errorf("runtime profile kind %q cannot be deployed", d.Profile.Kind)
}

// Teardown lists the tasks that remove a deployment's workload: the
// container by name (launchable_oci) or the Compose project with its
// networks and volumes (docker_compose).
func Teardown(profileKind, instanceID, name string) Task {
	if profileKind == manifest.ProfileDockerCompose {
		return Task{Kind: nodeapi.KindComposeDown, Payload: nodeapi.ComposeDown{Project: name}}
	}
	return Task{Kind: nodeapi.KindContainerRemove, Payload: nodeapi.ContainerRef{InstanceID: instanceID, Name: name, TimeoutSec: 10}}
}

// TeardownInstance removes every container labelled for the instance,
// and its scratch path and platform files on the node: the last step of a
// decommission, after each workload's own removal.
func TeardownInstance(instanceID string) Task {
	return Task{Kind: nodeapi.KindContainerRemove, Payload: nodeapi.ContainerRef{InstanceID: instanceID, TimeoutSec: 10}}
}

// Verify is the task that proves nothing labelled for the instance remains.
func Verify(instanceID string) Task {
	return Task{Kind: nodeapi.KindTeardownVerify, Payload: nodeapi.TeardownVerify{InstanceID: instanceID}}
}

// VerifyNamed proves that none of the named workloads of the instance
// remains (a removed member's), leaving the rest of it alone.
func VerifyNamed(instanceID string, names []string) Task {
	return Task{Kind: nodeapi.KindTeardownVerify, Payload: nodeapi.TeardownVerify{InstanceID: instanceID, Names: names}}
}

func pickGPUs(all []string, n int) ([]string, error) {
	if n > len(all) {
		return nil, fmt.Errorf("%d GPU(s) asked for, the allocation holds %d", n, len(all))
	}
	return append([]string(nil), all[:n]...), nil
}

// Labels are the ownership labels every workload object of an instance
// carries; teardown.verify looks for them.
func Labels(d Deployment) map[string]string {
	l := map[string]string{
		nodeapi.LabelManaged:  "true",
		nodeapi.LabelInstance: d.InstanceID,
		nodeapi.LabelProject:  d.ProjectID,
		nodeapi.LabelOrg:      d.OrgID,
		nodeapi.LabelNode:     d.NodeID,
		nodeapi.LabelApp:      d.AppSlug,
		nodeapi.LabelVersion:  d.Version,
	}
	if d.Member != nil {
		l[nodeapi.LabelMember] = d.Member.ID
	}
	return l
}

// env is what every workload receives besides its profile's own values:
// where its identity is and who it is. The private key travels only in the
// mounted file.
func env(d Deployment) map[string]string {
	e := map[string]string{
		"GPUAAS_APP_INSTANCE_ID": d.InstanceID,
		"GPUAAS_PROJECT_ID":      d.ProjectID,
		"GPUAAS_APP_SLUG":        d.AppSlug,
		"GPUAAS_APP_VERSION":     d.Version,
	}
	if d.UIBasePath != "" {
		e["GPUAAS_UI_BASE_PATH"] = d.UIBasePath
	}
	if d.Member != nil {
		e["GPUAAS_MEMBER_ID"], e["GPUAAS_MEMBER_NAME"], e["GPUAAS_MEMBER_ROLE"] = d.Member.ID, d.Member.Name, d.Member.Role
	}
	// The launch's effective parameters (validated against the profile's
	// schema, defaults applied), as one JSON object the app decodes.
	if p := bytes.TrimSpace(d.Parameters); len(p) > 0 && !bytes.Equal(p, []byte("null")) && !bytes.Equal(p, []byte("{}")) {
		e["GPUAAS_PARAMETERS"] = string(p)
	}
	if d.Identity != nil {
		e["GPUAAS_IDENTITY_FILE"] = IdentityPath
		e["GPUAAS_SERVICE_ACCOUNT_ID"] = d.Identity.ServiceAccountID
		e["GPUAAS_API_BASE_URL"] = d.Identity.APIBaseURL
	}
	return e
}

func identityMounts(d Deployment) []nodeapi.Mount {
	if d.Identity == nil {
		return nil
	}
	return []nodeapi.Mount{{Kind: "file", Target: IdentityPath, Content: d.Identity.keyFile(), Mode: 0o440, ReadOnly: true}}
}

// ReadinessBudgetSeconds bounds how long a deployment waits to be ready
// (for its probe, or for a start_completed event): the budget its profile
// declares (initial delay + period × failure threshold), else the default.
func ReadinessBudgetSeconds(r *manifest.Readiness) int {
	if r != nil {
		if budget := r.InitialDelaySeconds + r.PeriodSeconds*r.FailureThreshold; budget > 0 {
			return budget
		}
	}
	return DefaultReadinessTimeoutSeconds
}

// readiness turns the profile's probe into the agent's, with the deploy
// timeout: the probe's own budget (initial delay + period × failure
// threshold) when it declares one, else the default.
func readiness(d Deployment, port int) *nodeapi.Readiness {
	r := d.Profile.Readiness
	if (r == nil && port == 0) || (r != nil && r.Type == manifest.ReadinessStartCompleted) {
		// Nothing to probe: the node reports the workload started, and the
		// control plane waits for its start_completed event.
		return nil
	}
	out := &nodeapi.Readiness{Port: port, TimeoutSeconds: DefaultReadinessTimeoutSeconds}
	if r != nil {
		out.Port = r.Port
		if r.Type == "http" {
			out.HTTPPath = r.Path
			if out.HTTPPath == "" {
				out.HTTPPath = "/"
			}
		}
		out.TimeoutSeconds = ReadinessBudgetSeconds(r)
	}
	if d.ReadinessTimeoutSeconds > 0 {
		out.TimeoutSeconds = d.ReadinessTimeoutSeconds
	}
	return out
}

func hostPort(d Deployment) int {
	if d.Resources.HostPort > 0 {
		return d.Resources.HostPort
	}
	return d.HostPort
}

func renderContainer(d Deployment, gpus []string) (nodeapi.ContainerRun, error) {
	img, ok := d.Images[LaunchImage]
	if !ok || img.Digest == "" {
		return nodeapi.ContainerRun{}, fmt.Errorf("version %s has no verified image to run", d.Version)
	}
	p := d.Profile
	e := env(d)
	for _, v := range p.Env {
		e[v.Name] = v.Value
	}
	run := nodeapi.ContainerRun{
		Name: d.Name, Image: img, Command: p.Command, Args: p.Args, Env: e, GPUUUIDs: gpus,
		CPUCores: float64(d.Resources.CPUCores), MemoryMiB: int64(d.Resources.MemoryGiB) * 1024,
		Mounts: identityMounts(d), Labels: Labels(d),
	}
	first := 0
	for _, port := range p.Ports {
		if port.Expose == manifest.ExposeNone {
			continue
		}
		host := 0
		if first == 0 {
			first, host = port.Container, hostPort(d)
		}
		run.Ports = append(run.Ports, nodeapi.PortMapping{Container: port.Container, Host: host, Protocol: "tcp"})
	}
	run.Readiness = readiness(d, first)
	return run, nil
}

// itoa keeps renderers readable.
func itoa(n int) string { return strconv.Itoa(n) }
