// Package compose runs platform-rendered Compose projects on the Docker
// Engine API. compose-go loads and validates the project; the agent drives
// the engine itself for a curated subset (no compose CLI): services with
// images pinned by digest, command, environment, host-local ports, GPU
// device requests, depends_on order, one project network and named volumes.
package compose

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/compose-spec/compose-go/v2/graph"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/docker"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"gopkg.in/yaml.v3"
)

// Standard Compose labels, so `docker compose ls`/`ps` understand the project.
const (
	LabelProject    = "com.docker.compose.project"
	LabelService    = "com.docker.compose.service"
	LabelNumber     = "com.docker.compose.container-number"
	LabelOneoff     = "com.docker.compose.oneoff"
	LabelConfigHash = "com.docker.compose.config-hash"
	LabelNetwork    = "com.docker.compose.network"
	LabelVolume     = "com.docker.compose.volume"
	// LabelDependsOn lists a service's dependencies as compose does
	// ("db:service_started:false,cache:…"), so that down can stop the
	// project in reverse order without the compose file.
	LabelDependsOn = "com.docker.compose.depends_on"
)

var projectName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

func invalid(format string, args ...any) error {
	return &docker.Failure{Reason: nodeapi.ReasonInvalidTask, Message: fmt.Sprintf(format, args...)}
}

// The keys of the curated subset: a project's top-level keys and a
// service's. Anything else is refused before compose-go reads the
// document, because compose-go acts on some keys as it loads: env_file and
// label_file read files of the node into the service's environment and
// labels, extends and include read other Compose files from the node.
var (
	topLevelKeys = []string{"name", "services", "networks", "volumes"}
	serviceKeys  = []string{"image", "command", "entrypoint", "environment", "ports", "volumes", "labels", "networks",
		"depends_on", "deploy", "cpus", "mem_limit", "shm_size", "restart", "read_only"}
)

// checkKeys refuses a document with a key outside the curated subset. A
// document that is not YAML, or not of the expected shape, is left to
// compose-go to report.
func checkKeys(doc []byte) error {
	var top map[string]any
	if yaml.Unmarshal(doc, &top) != nil {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		if !slices.Contains(topLevelKeys, k) {
			return invalid("compose project: top-level key %q is not supported (the curated subset has %s)", k, strings.Join(topLevelKeys, ", "))
		}
	}
	services, _ := top["services"].(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(services)) {
		svc, _ := services[name].(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(svc)) {
			if !slices.Contains(serviceKeys, k) {
				return invalid("service %s: %s is not supported (the curated subset has %s)", name, k, strings.Join(serviceKeys, ", "))
			}
		}
	}
	return nil
}

// Load parses and validates a rendered project and checks it stays inside
// the curated subset.
func Load(ctx context.Context, u nodeapi.ComposeUp) (*types.Project, error) {
	if !projectName.MatchString(u.Project) {
		return nil, invalid("compose project name %q must be lower-case letters, digits, _ and -", u.Project)
	}
	if err := checkKeys(u.YAML); err != nil {
		return nil, err
	}
	wd, err := os.MkdirTemp("", "gpuaas-compose-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(wd)
	env := types.Mapping{}
	for k, v := range u.Env {
		env[k] = v
	}
	p, err := loader.LoadWithContext(ctx, types.ConfigDetails{WorkingDir: wd, Environment: env,
		ConfigFiles: []types.ConfigFile{{Filename: "compose.yaml", Content: u.YAML}}},
		func(o *loader.Options) { o.SetProjectName(u.Project, true) })
	if err != nil {
		return nil, invalid("compose project: %v", err)
	}
	for name, s := range p.Services {
		switch {
		case s.Build != nil:
			return nil, invalid("service %s: build is not supported; reference an image by digest", name)
		case !strings.Contains(s.Image, "@sha256:"):
			return nil, invalid("service %s: image %q is not pinned by digest", name, s.Image)
		// checkKeys refuses these keys already; compose-go's reading of the
		// document is checked too, so that no spelling of them gets past.
		case s.Privileged || s.NetworkMode != "" || s.Pid != "" || s.Ipc != "" || len(s.CapAdd) > 0 || len(s.SecurityOpt) > 0 || len(s.Devices) > 0:
			return nil, invalid("service %s: privileged, network_mode, pid, ipc, cap_add, security_opt and devices are not supported", name)
		}
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeVolume || v.Source == "" {
				return nil, invalid("service %s: only named volumes are supported (no bind mounts)", name)
			}
		}
	}
	return p, nil
}

// pulls are the pulls of a project's service images, each image once, in
// service name order: with the task's credentials when it lists the image
// (listed), else without (an image the engine holds, or a public one).
func pulls(p *types.Project, listed []nodeapi.ImagePull) []nodeapi.ImagePull {
	byRef := map[string]nodeapi.ImagePull{}
	for _, ip := range listed {
		byRef[ip.Repository+"@"+ip.Digest] = ip
	}
	var out []nodeapi.ImagePull
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		img := p.Services[name].Image
		if seen[img] {
			continue
		}
		seen[img] = true
		ip, ok := byRef[img]
		if !ok {
			repo, dg, _ := strings.Cut(img, "@")
			ip = nodeapi.ImagePull{Repository: repo, Digest: dg}
		}
		out = append(out, ip)
	}
	return out
}

// Images lists the images (repository@digest) Up pulls or uses for u: the
// ones u lists and the ones only its services name (Load checks each is
// pinned by digest). The agent holds every one of them for the run, so the
// pruner cannot remove one Up found on the engine before its container is
// created.
func Images(ctx context.Context, u nodeapi.ComposeUp) ([]string, error) {
	p, err := Load(ctx, u)
	if err != nil {
		return nil, err
	}
	var refs []string
	for _, ip := range u.Images {
		refs = append(refs, ip.Repository+"@"+ip.Digest)
	}
	for _, ip := range pulls(p, u.Images) {
		refs = append(refs, ip.Repository+"@"+ip.Digest)
	}
	slices.Sort(refs)
	return slices.Compact(refs), nil
}

// Up pulls every service image by digest (with the task's credentials),
// creates the project network and volumes, and starts the services in
// depends_on order. Readiness applies to u.Service.
func Up(ctx context.Context, d *docker.Driver, o docker.Owner, u nodeapi.ComposeUp) (nodeapi.RunOutput, error) {
	p, err := Load(ctx, u)
	if err != nil {
		return nodeapi.RunOutput{}, err
	}
	files, err := serviceMounts(d, o, p, u.Mounts)
	if err != nil {
		return nodeapi.RunOutput{}, err
	}
	for _, ip := range pulls(p, u.Images) {
		if _, err := d.Pull(ctx, ip); err != nil {
			return nodeapi.RunOutput{}, err
		}
	}
	base := func(extra map[string]string) map[string]string {
		l := d.Labels(o, nil)
		l[LabelProject] = p.Name
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	netName := p.Name + "_default"
	if _, err := d.C.NetworkInspect(ctx, netName, client.NetworkInspectOptions{}); err != nil {
		if _, err := d.C.NetworkCreate(ctx, netName, client.NetworkCreateOptions{Driver: "bridge", Labels: base(map[string]string{LabelNetwork: "default"})}); err != nil && !cerrdefs.IsConflict(err) {
			return nodeapi.RunOutput{}, fmt.Errorf("create network: %w", err)
		}
	}
	for name := range p.Volumes {
		if _, err := d.C.VolumeCreate(ctx, client.VolumeCreateOptions{Name: p.Name + "_" + name, Labels: base(map[string]string{LabelVolume: name})}); err != nil {
			return nodeapi.RunOutput{}, fmt.Errorf("create volume: %w", err)
		}
	}
	out := nodeapi.RunOutput{ContainerIDs: []string{}, Ports: []nodeapi.PortMapping{}, HostAddress: d.HostIP()}
	var readyID string
	// compose-go starts services that do not depend on each other at
	// once, each in a goroutine of its own: what they record is shared.
	var mu sync.Mutex
	err = graph.InDependencyOrder(ctx, p, func(ctx context.Context, name string, s types.ServiceConfig) error {
		id, err := startService(ctx, d, p, s, base, netName, u.GPUUUIDs, o.InstanceID, files[name])
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		out.ContainerIDs = append(out.ContainerIDs, id)
		if name == u.Service || (u.Service == "" && len(p.Services) == 1) {
			readyID = id
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	if out.ImageDigests, err = d.RunningDigests(ctx, out.ContainerIDs); err != nil {
		return out, err
	}
	if readyID != "" {
		ports, err := d.BoundPorts(ctx, readyID)
		if err != nil {
			return out, err
		}
		out.Ports = ports
		return out, d.WaitReady(ctx, readyID, ports, u.Readiness)
	}
	return out, nil
}

// serviceMounts writes the task's platform-owned files (the instance's
// identity key) under the instance's scratch path, exactly as container.run
// does, and says which read-only bind mounts go into which service: only
// the services each mount names. Teardown removes the files with the
// instance's path, and teardown.verify checks that path is gone.
func serviceMounts(d *docker.Driver, o docker.Owner, p *types.Project, ms []nodeapi.Mount) (map[string][]mount.Mount, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	for i, m := range ms {
		if len(m.Services) == 0 {
			return nil, invalid("mount %d (%s): name the services it goes into", i, m.Target)
		}
		for _, name := range m.Services {
			if _, ok := p.Services[name]; !ok {
				return nil, invalid("mount %d (%s): no service %q in the project", i, m.Target, name)
			}
		}
	}
	bound, err := d.Mounts(o.InstanceID, ms)
	if err != nil {
		return nil, err
	}
	out := map[string][]mount.Mount{}
	for i, m := range ms {
		for _, name := range m.Services {
			out[name] = append(out[name], bound[i])
		}
	}
	return out, nil
}

func startService(ctx context.Context, d *docker.Driver, p *types.Project, s types.ServiceConfig, base func(map[string]string) map[string]string,
	netName string, gpus []string, instanceID string, files []mount.Mount) (string, error) {
	name := p.Name + "-" + s.Name + "-1"
	if ex, err := d.C.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err == nil {
		if ex.Container.Config.Labels[nodeapi.LabelManaged] != "true" || ex.Container.Config.Labels[LabelProject] != p.Name {
			return "", invalid("a container named %q exists and is not this project's", name)
		}
		if ex.Container.State != nil && ex.Container.State.Running {
			return ex.Container.ID, nil
		}
		_, err := d.C.ContainerStart(ctx, ex.Container.ID, client.ContainerStartOptions{})
		return ex.Container.ID, err
	}
	hash, _ := json.Marshal(s)
	sum := sha256.Sum256(hash)
	var ports []nodeapi.PortMapping
	for _, pc := range s.Ports {
		hp, _ := strconv.Atoi(pc.Published)
		ports = append(ports, nodeapi.PortMapping{Container: int(pc.Target), Host: hp, Protocol: pc.Protocol})
	}
	exposed, bindings, err := d.PortBindings(ports)
	if err != nil {
		return "", err
	}
	var mounts []mount.Mount
	for _, v := range s.Volumes {
		mounts = append(mounts, mount.Mount{Type: mount.TypeVolume, Source: p.Name + "_" + v.Source, Target: v.Target, ReadOnly: v.ReadOnly})
	}
	mounts = append(mounts, files...)
	// The service's own limits, as the renderer sized them; every service
	// gets the workload process limit.
	pids := docker.PidsLimit
	res := container.Resources{NanoCPUs: int64(float64(s.CPUS) * 1e9), Memory: int64(s.MemLimit), PidsLimit: &pids}
	if !wantsGPU(s) {
		gpus = nil
	}
	res.DeviceRequests = docker.GPURequests(gpus)
	env := docker.WorkloadEnv(s.Environment, gpus)
	var deps []string
	for dep, c := range s.DependsOn {
		deps = append(deps, dep+":"+c.Condition+":"+strconv.FormatBool(c.Restart))
	}
	slices.Sort(deps)
	cfg := &container.Config{Image: s.Image, Cmd: s.Command, Env: env, ExposedPorts: exposed, Labels: base(map[string]string{
		LabelService: s.Name, LabelNumber: "1", LabelOneoff: "False", LabelConfigHash: hex.EncodeToString(sum[:]),
		LabelDependsOn: strings.Join(deps, ",")})}
	if len(s.Entrypoint) > 0 {
		cfg.Entrypoint = s.Entrypoint
	}
	r, err := d.C.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg,
		// The workload privilege policy, shared with container.run.
		HostConfig: docker.Harden(&container.HostConfig{PortBindings: bindings, Mounts: mounts, GroupAdd: docker.GroupAdd(instanceID, files), Resources: res,
			ShmSize: int64(s.ShmSize)}),
		NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netName: {Aliases: []string{s.Name}}}}})
	if err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	if _, err := d.C.ContainerStart(ctx, r.ID, client.ContainerStartOptions{}); err != nil {
		return r.ID, &docker.Failure{Reason: nodeapi.ReasonContainerExited, Message: "start " + name + ": " + err.Error(), LogTail: d.LogTail(ctx, r.ID, 50)}
	}
	return r.ID, nil
}

// wantsGPU reports whether a service reserves GPU devices.
func wantsGPU(s types.ServiceConfig) bool {
	if s.Deploy == nil || s.Deploy.Resources.Reservations == nil {
		return false
	}
	for _, dv := range s.Deploy.Resources.Reservations.Devices {
		if slices.Contains(dv.Capabilities, "gpu") {
			return true
		}
	}
	return false
}

// downStopSeconds is how long each service gets to exit on SIGTERM before
// it is killed (docker compose down's default).
const downStopSeconds = 10

// Down removes the project's containers (with anonymous volumes), its
// network and its named volumes — only those carrying the gpuaas label.
// Each container is stopped gracefully first (SIGTERM, then SIGKILL after
// downStopSeconds), as docker compose down does, and in its order: a
// service stops once every service that depends on it is gone, and the
// services of one such step stop at once.
func Down(ctx context.Context, d *docker.Driver, project, instanceID string) error {
	if !projectName.MatchString(project) {
		return invalid("compose project name %q is not valid", project)
	}
	f := d.Managed(LabelProject + "=" + project)
	cs, err := d.C.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return err
	}
	for _, step := range stopOrder(cs.Items) {
		var wg sync.WaitGroup
		errs := make([]error, len(step))
		for i, id := range step {
			wg.Go(func() { errs[i] = d.RemoveContainer(ctx, id, downStopSeconds) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	ns, err := d.C.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return err
	}
	for _, n := range ns.Items {
		if _, err := d.C.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			return err
		}
	}
	vs, err := d.C.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return err
	}
	for _, v := range vs.Items {
		if _, err := d.C.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return err
		}
	}
	return d.RemoveInstanceDir(instanceID)
}

// stopOrder groups a project's containers into the steps down stops them
// in: first the services nothing depends on, then those whose dependents
// are all in earlier steps (the reverse of the start order). Containers
// without the depends_on label (made before Up wrote it) depend on
// nothing; a cycle, which Up refuses, would end in one last step.
func stopOrder(cs []container.Summary) [][]string {
	deps := map[string][]string{} // service -> the services it depends on
	left := map[string][]string{} // service not yet stopped -> its containers
	for _, c := range cs {
		svc := c.Labels[LabelService]
		left[svc] = append(left[svc], c.ID)
		for _, dep := range strings.Split(c.Labels[LabelDependsOn], ",") {
			if name, _, _ := strings.Cut(dep, ":"); name != "" {
				deps[svc] = append(deps[svc], name)
			}
		}
	}
	var steps [][]string
	for len(left) > 0 {
		needed := map[string]bool{} // still depended on by a service not yet stopped
		for svc := range left {
			for _, dep := range deps[svc] {
				needed[dep] = true
			}
		}
		var step []string
		for _, svc := range slices.Sorted(maps.Keys(left)) {
			if !needed[svc] {
				step = append(step, left[svc]...)
				delete(left, svc)
			}
		}
		if len(step) == 0 { // a cycle
			for _, svc := range slices.Sorted(maps.Keys(left)) {
				step = append(step, left[svc]...)
			}
			left = nil
		}
		steps = append(steps, step)
	}
	return steps
}
