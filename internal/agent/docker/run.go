package docker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// Owner says whom a workload belongs to; it becomes the ownership labels.
type Owner = driver.Owner

// Labels are the ownership labels of a workload of o on this node plus
// extra gpuaas.* labels (anything else in extra is dropped: labels are
// visible to every engine user, so nothing secret may go there).
func (d *Driver) Labels(o Owner, extra map[string]string) map[string]string {
	l := map[string]string{}
	for k, v := range extra {
		if strings.HasPrefix(k, "gpuaas.") {
			l[k] = v
		}
	}
	l[nodeapi.LabelManaged] = "true"
	l[nodeapi.LabelNode] = d.cfg.NodeID
	if o.TaskID != "" {
		l[nodeapi.LabelTask] = o.TaskID
	}
	if o.InstanceID != "" {
		l[nodeapi.LabelInstance] = o.InstanceID
	}
	if o.ProjectID != "" {
		l[nodeapi.LabelProject] = o.ProjectID
	}
	return l
}

// GPURequests asks the NVIDIA runtime for exactly the named GPUs; none when
// no GPUs are named, so CPU-only workloads run on hosts without the toolkit.
func GPURequests(uuids []string) []container.DeviceRequest {
	if len(uuids) == 0 {
		return nil
	}
	return []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: uuids, Capabilities: [][]string{{"gpu"}}}}
}

// VisibleDevicesEnv is the variable the NVIDIA container runtime reads to
// decide which GPUs a container sees.
const VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

// WorkloadEnv is a workload's environment as it reaches the engine: env,
// sorted, with NVIDIA_VISIBLE_DEVICES set by the platform alone — the
// workload's GPUs, or "void" (no GPU, no driver) when it has none. On a
// node whose default runtime is nvidia, the runtime hands a container every
// GPU its environment names, and "all" reaches it from a task's env or
// from the image's own ENV (the CUDA base images set it): a CPU-only
// workload, or a sidecar, would see every GPU of the node, the other
// tenants' included. Whatever env says for it is dropped.
func WorkloadEnv(env map[string]*string, gpus []string) []string {
	out := make([]string, 0, len(env)+1)
	for k, v := range env {
		if v != nil && k != VisibleDevicesEnv {
			out = append(out, k+"="+*v)
		}
	}
	slices.Sort(out)
	visible := "void"
	if len(gpus) > 0 {
		visible = strings.Join(gpus, ",")
	}
	return append(out, VisibleDevicesEnv+"="+visible)
}

// PidsLimit bounds the processes and threads of one workload container: a
// workload that forks without end exhausts its own limit, not the node's
// process table that every tenant's workload and the agent share.
const PidsLimit int64 = 16384

// NoNewPrivileges is the security option that keeps a workload's processes
// from gaining privileges through execve: a setuid or setcap binary in the
// image (su, ping, a planted one) runs with the privileges of its caller.
const NoNewPrivileges = "no-new-privileges:true"

// DroppedCaps are the capabilities every workload container loses from the
// engine's default set. NET_RAW gives raw and packet sockets: a workload
// could forge ARP replies and packets of any source on the bridge it
// shares with other tenants' workloads. The rest of the default set stays
// (apps chown their files, bind ports below 1024, switch users).
var DroppedCaps = []string{"NET_RAW"}

// Harden applies the privilege policy of every workload container to hc
// and returns it: no new privileges, DroppedCaps dropped, and no
// privileged mode, added capabilities or other security options, whatever
// hc held. container.run and each Compose service build their HostConfig
// apart, and both pass it here as it goes to the engine, so the policy is
// written once and neither path can drift from it or be left without it.
func Harden(hc *container.HostConfig) *container.HostConfig {
	hc.Privileged = false
	hc.CapAdd = nil
	hc.SecurityOpt = []string{NoNewPrivileges}
	for _, c := range DroppedCaps {
		if !slices.Contains(hc.CapDrop, c) {
			hc.CapDrop = append(hc.CapDrop, c)
		}
	}
	return hc
}

// WorkloadNetwork is the bridge network every container.run workload
// joins. Inter-container traffic is off on it: the engine's default bridge
// lets every container reach every other container's ports directly, so one
// tenant's workload could talk to another's app (a UI that trusts the UI
// gateway in front of it) without passing the gateway. Ports published on
// the host-local address still reach the workload.
const WorkloadNetwork = "gpuaas-workloads"

// labelNetwork marks the platform's own networks; iccOption is the bridge
// option that turns inter-container traffic off.
const (
	labelNetwork = "gpuaas.network"
	iccOption    = "com.docker.network.bridge.enable_icc"
)

// workloadNetwork returns the id of WorkloadNetwork, creating it when the
// engine has none. Agents sharing an engine may each create one at once
// (the engine allows two networks of one name): every agent then uses the
// one with the lowest id, and the others stay unused.
func (d *Driver) workloadNetwork(ctx context.Context) (string, error) {
	d.netMu.Lock()
	defer d.netMu.Unlock()
	find := func() (string, error) {
		res, err := d.C.NetworkList(ctx, client.NetworkListOptions{Filters: d.Managed(labelNetwork + "=" + WorkloadNetwork)})
		if err != nil {
			return "", fail(nodeapi.ReasonInternal, "list networks: %v", err)
		}
		var ids []string
		for _, n := range res.Items {
			if n.Name == WorkloadNetwork && n.Options[iccOption] == "false" {
				ids = append(ids, n.ID)
			}
		}
		slices.Sort(ids)
		if len(ids) == 0 {
			return "", nil
		}
		return ids[0], nil
	}
	if id, err := find(); id != "" || err != nil {
		return id, err
	}
	if _, err := d.C.NetworkCreate(ctx, WorkloadNetwork, client.NetworkCreateOptions{Driver: "bridge",
		Options: map[string]string{iccOption: "false"},
		Labels:  map[string]string{nodeapi.LabelManaged: "true", labelNetwork: WorkloadNetwork}}); err != nil && !cerrdefs.IsConflict(err) {
		return "", fail(nodeapi.ReasonInternal, "create the workload network: %v", err)
	}
	id, err := find()
	if id == "" && err == nil {
		err = fail(nodeapi.ReasonInternal, "the workload network %s was created but is not found", WorkloadNetwork)
	}
	return id, err
}

// FileGroup is the group id that owns an instance's platform files (its
// identity key) and that the instance's containers join as a supplementary
// group: the workload reads its key whatever user its image runs as, and
// no other user on the host can (mode 0440, root:FileGroup). It is derived
// from the instance id, in a range host accounts do not use.
func FileGroup(instanceID string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(instanceID))
	return fileGroupBase + int(h.Sum32()%fileGroupSpan)
}

const fileGroupBase, fileGroupSpan = 2_000_000_000, 100_000_000 // below 2^31 for every runtime

// GroupAdd is the supplementary group of a container that mounts the
// instance's platform files (none when it mounts none).
func GroupAdd(instanceID string, files []mount.Mount) []string {
	if len(files) == 0 {
		return nil
	}
	return []string{strconv.Itoa(FileGroup(instanceID))}
}

// Mounts writes platform-owned files under the instance's scratch path and
// returns the bind mounts for them (files read-only, readable by the
// instance's FileGroup only).
func (d *Driver) Mounts(instanceID string, ms []nodeapi.Mount) ([]mount.Mount, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	if instanceID == "" || strings.ContainsAny(instanceID, "/\\.") {
		return nil, fail(nodeapi.ReasonInvalidTask, "mounts need a task with an instance id")
	}
	dir := d.instanceDir(instanceID)
	var out []mount.Mount
	for i, m := range ms {
		if !strings.HasPrefix(m.Target, "/") {
			return nil, fail(nodeapi.ReasonInvalidTask, "mount %d: target must be an absolute container path", i)
		}
		switch m.Kind {
		case "file":
			p := filepath.Join(dir, "files", strconv.Itoa(i))
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return nil, err
			}
			// Never readable by other host users, whatever the task asks.
			mode := os.FileMode(m.Mode) & 0o770
			if mode == 0 {
				mode = 0o440
			}
			// Every deployment of the instance (an upgrade, a rollback, a
			// retry, a compose.up delivered again) writes the file anew. The
			// last one left it read-only, which only root opens for writing
			// regardless: an agent that is not root makes its own file
			// writable first. It is rewritten in place, as root rewrites it.
			if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			if err := os.WriteFile(p, m.Content, 0o600); err != nil {
				return nil, err
			}
			if err := os.Chown(p, -1, FileGroup(instanceID)); errors.Is(err, fs.ErrPermission) {
				// Only root may give a file to a group it is not in. An
				// agent that is not root (gpuaas dev on a laptop, as a
				// member of the docker group) cannot keep the file from
				// other users; it says so and keeps the workload working.
				d.cfg.Logger.Warn("the agent is not root: an instance's identity file stays readable by every local user", "path", p)
				mode = 0o444
			} else if err != nil {
				return nil, fail(nodeapi.ReasonInternal, "give %s to the workload's group: %v", m.Target, err)
			}
			if err := os.Chmod(p, mode); err != nil {
				return nil, err
			}
			out = append(out, mount.Mount{Type: mount.TypeBind, Source: p, Target: m.Target, ReadOnly: true})
		case "scratch":
			p := filepath.Join(dir, "scratch", strconv.Itoa(i))
			if err := os.MkdirAll(p, 0o777); err != nil {
				return nil, err
			}
			_ = os.Chmod(p, 0o777)
			out = append(out, mount.Mount{Type: mount.TypeBind, Source: p, Target: m.Target, ReadOnly: m.ReadOnly})
		default:
			return nil, fail(nodeapi.ReasonInvalidTask, "mount %d: kind must be file or scratch", i)
		}
	}
	return out, nil
}

// HostIP is the address ports are published on.
func (d *Driver) HostIP() string { return d.cfg.HostAddress }

// PortBindings publishes ports on the host-local address only.
func (d *Driver) PortBindings(ps []nodeapi.PortMapping) (network.PortSet, network.PortMap, error) {
	if len(ps) == 0 {
		return nil, nil, nil
	}
	ip, err := netip.ParseAddr(d.cfg.HostAddress)
	if err != nil {
		return nil, nil, fmt.Errorf("host address %q: %w", d.cfg.HostAddress, err)
	}
	set, pm := network.PortSet{}, network.PortMap{}
	for _, p := range ps {
		proto := p.Protocol
		if proto == "" {
			proto = "tcp"
		}
		port, err := network.ParsePort(fmt.Sprintf("%d/%s", p.Container, proto))
		if err != nil || p.Container <= 0 || p.Container > 65535 || p.Host < 0 || p.Host > 65535 {
			return nil, nil, fail(nodeapi.ReasonInvalidTask, "port %d/%s is not a valid port", p.Container, proto)
		}
		set[port] = struct{}{}
		hp := ""
		if p.Host > 0 {
			if err := hostPortFree(ip, p.Host, proto); err != nil {
				return nil, nil, err
			}
			hp = strconv.Itoa(p.Host)
		}
		pm[port] = append(pm[port], network.PortBinding{HostIP: ip, HostPort: hp})
	}
	return set, pm, nil
}

// hostPortFree refuses a host port that something on the node already
// listens on. The engine's userland proxy would fail to bind it too, but
// only after the container was made; and an engine without the proxy
// (userland-proxy: false) binds nothing: it rewrites the node's own
// connections to the port, loopback included, to the container, which
// would then receive what the node's service was sent.
func hostPortFree(ip netip.Addr, port int, proto string) error {
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(port))
	var (
		c   io.Closer
		err error
	)
	switch proto {
	case "tcp":
		c, err = net.Listen("tcp", addr)
	case "udp":
		c, err = net.ListenPacket("udp", addr)
	default:
		return nil
	}
	if err != nil {
		return fail(nodeapi.ReasonInvalidTask, "host port %d/%s on %s is already in use on the node: choose another host_port", port, proto, ip)
	}
	return c.Close()
}

// Run starts one container for a task. A container of the same name that
// this task already started is adopted (at-least-once delivery).
func (d *Driver) Run(ctx context.Context, o Owner, r nodeapi.ContainerRun) (nodeapi.RunOutput, error) {
	if r.Name == "" {
		return nodeapi.RunOutput{}, fail(nodeapi.ReasonInvalidTask, "container.run needs a name")
	}
	ref, err := d.Pull(ctx, r.Image)
	if err != nil {
		return nodeapi.RunOutput{}, err
	}
	id := ""
	if ex, err := d.C.ContainerInspect(ctx, r.Name, client.ContainerInspectOptions{}); err == nil {
		if ex.Container.Config == nil || ex.Container.Config.Labels[nodeapi.LabelManaged] != "true" || ex.Container.Config.Labels[nodeapi.LabelTask] != o.TaskID {
			return nodeapi.RunOutput{}, fail(nodeapi.ReasonInvalidTask, "a container named %q exists and is not this task's", r.Name)
		}
		id = ex.Container.ID
	}
	if id == "" {
		exposed, bindings, err := d.PortBindings(r.Ports)
		if err != nil {
			return nodeapi.RunOutput{}, err
		}
		mounts, err := d.Mounts(o.InstanceID, r.Mounts)
		if err != nil {
			return nodeapi.RunOutput{}, err
		}
		env := make(map[string]*string, len(r.Env))
		for k, v := range r.Env {
			env[k] = &v
		}
		netID, err := d.workloadNetwork(ctx)
		if err != nil {
			return nodeapi.RunOutput{}, err
		}
		pids := PidsLimit
		hc := Harden(&container.HostConfig{NetworkMode: container.NetworkMode(netID), PortBindings: bindings, Mounts: mounts,
			GroupAdd: GroupAdd(o.InstanceID, mounts), Resources: container.Resources{
				Memory: r.MemoryMiB << 20, NanoCPUs: int64(r.CPUCores * 1e9), DeviceRequests: GPURequests(r.GPUUUIDs), PidsLimit: &pids}})
		res, err := d.C.ContainerCreate(ctx, client.ContainerCreateOptions{Name: r.Name, HostConfig: hc, Config: &container.Config{
			Image: ref, Entrypoint: r.Command, Cmd: r.Args, Env: WorkloadEnv(env, r.GPUUUIDs), ExposedPorts: exposed, Labels: d.Labels(o, r.Labels)}})
		if err != nil {
			return nodeapi.RunOutput{}, fail(nodeapi.ReasonInternal, "create container: %v", err)
		}
		id = res.ID
	}
	if _, err := d.C.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return nodeapi.RunOutput{}, &Failure{Reason: nodeapi.ReasonContainerExited, Message: "start: " + err.Error(), LogTail: d.LogTail(ctx, id, 50)}
	}
	out := nodeapi.RunOutput{ContainerIDs: []string{id}, HostAddress: d.cfg.HostAddress, ImageDigest: r.Image.Digest, Ports: []nodeapi.PortMapping{}}
	if out.ImageDigests, err = d.RunningDigests(ctx, out.ContainerIDs); err != nil {
		return out, err
	}
	ports, err := d.BoundPorts(ctx, id)
	if err != nil {
		return out, err
	}
	out.Ports = ports
	return out, d.WaitReady(ctx, id, ports, r.Readiness)
}

// BoundPorts reads the host ports a container really got.
func (d *Driver) BoundPorts(ctx context.Context, id string) ([]nodeapi.PortMapping, error) {
	ins, err := d.C.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return nil, err
	}
	out := []nodeapi.PortMapping{}
	if ins.Container.NetworkSettings == nil {
		return out, nil
	}
	for p, bs := range ins.Container.NetworkSettings.Ports {
		for _, b := range bs {
			hp, _ := strconv.Atoi(b.HostPort)
			if b.HostIP.Is6() && d.cfg.HostAddress != b.HostIP.String() {
				continue
			}
			out = append(out, nodeapi.PortMapping{Container: int(p.Num()), Host: hp, Protocol: string(p.Proto())})
		}
	}
	return out, nil
}

// WaitReady probes the published host port of rd.Port (TCP, or HTTP 2xx/3xx
// when a path is set) until it answers or the timeout passes.
func (d *Driver) WaitReady(ctx context.Context, id string, ports []nodeapi.PortMapping, rd *nodeapi.Readiness) error {
	if rd == nil {
		return d.checkRunning(ctx, id)
	}
	host := 0
	for _, p := range ports {
		if p.Container == rd.Port {
			host = p.Host
		}
	}
	if host == 0 {
		// A container that already exited has no bindings left: that, not
		// the task, is what failed.
		if err := d.checkRunning(ctx, id); err != nil {
			return err
		}
		return fail(nodeapi.ReasonInvalidTask, "readiness port %d is not published", rd.Port)
	}
	timeout := time.Duration(rd.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	addr := net.JoinHostPort(d.cfg.HostAddress, strconv.Itoa(host))
	deadline := time.Now().Add(timeout)
	// The probe runs on the node, outside the workload's network: it never
	// follows a redirect the workload answers with (a Location on the
	// node's loopback or a metadata address would make the agent request
	// it for the workload). A 3xx answer is ready as it stands.
	hc := &http.Client{Timeout: 2 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// Most workloads answer within a few hundred milliseconds of starting:
	// probe early and often, then back off to the steady cadence, so
	// readiness is noticed within ~10% of when it happened.
	wait := readinessFirstWait
	for {
		ok, last := probe(ctx, hc, addr, rd.HTTPPath)
		if ok {
			return nil
		}
		// Not ready: a workload that exited fails now, with its logs.
		if err := d.checkRunning(ctx, id); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return &Failure{Reason: nodeapi.ReasonReadinessTimeout, Message: fmt.Sprintf("not ready within %s; the last probe: %s", timeout, last), LogTail: d.LogTail(ctx, id, 50)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, readinessMaxWait)
	}
}

// The readiness probe's back-off: from the first wait up to the steady one.
const (
	readinessFirstWait = 10 * time.Millisecond
	readinessMaxWait   = 250 * time.Millisecond
)

// probe reports whether the workload is ready and, when not, what the probe
// saw: an operator reading a readiness timeout needs to know whether
// nothing listened or the app answered on the wrong path.
func probe(ctx context.Context, hc *http.Client, addr, path string) (bool, string) {
	if path == "" {
		// Docker's userland proxy accepts on the host port even when nothing
		// listens in the container, then closes the connection: a probe that
		// is closed at once is not ready; one held open (or answered) is.
		c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return false, "TCP connect to " + addr + ": " + err.Error()
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		var b [1]byte
		_, err = c.Read(b[:])
		var ne net.Error
		if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
			return true, ""
		}
		return false, "TCP " + addr + " accepted and closed at once (nothing listens in the container)"
	}
	url := "http://" + addr + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, "GET " + url + ": " + err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		return true, ""
	}
	return false, "GET " + url + " answered " + resp.Status
}

func (d *Driver) checkRunning(ctx context.Context, id string) error {
	ins, err := d.C.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return err
	}
	if st := ins.Container.State; st != nil && !st.Running {
		return &Failure{Reason: nodeapi.ReasonContainerExited, Message: fmt.Sprintf("container exited with code %d", st.ExitCode), LogTail: d.LogTail(ctx, id, 50)}
	}
	return nil
}

// find resolves a reference to gpuaas-labelled containers of this engine.
func (d *Driver) find(ctx context.Context, ref nodeapi.ContainerRef) ([]string, error) {
	var f client.Filters
	switch {
	case ref.ContainerID != "":
		f = d.Managed().Add("id", ref.ContainerID)
	case ref.Name != "":
		f = d.Managed().Add("name", "^/"+ref.Name+"$")
	case ref.InstanceID != "":
		f = d.Managed(nodeapi.LabelInstance + "=" + ref.InstanceID)
	default:
		return nil, fail(nodeapi.ReasonInvalidTask, "name a container by instance id, container id or name")
	}
	res, err := d.C.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(res.Items))
	for _, c := range res.Items {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// Stop stops the referenced containers gracefully (SIGTERM, then SIGKILL
// after the timeout). Stopping what is already gone succeeds.
func (d *Driver) Stop(ctx context.Context, ref nodeapi.ContainerRef) error {
	ids, err := d.find(ctx, ref)
	if err != nil {
		return err
	}
	t := ref.TimeoutSec
	if t <= 0 {
		t = 10
	}
	for _, id := range ids {
		if _, err := d.C.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &t}); err != nil && !cerrdefs.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// Remove removes the referenced containers with their anonymous volumes.
// With a timeout it stops each gracefully first (SIGTERM, then SIGKILL
// after the timeout), so a workload decommissioned or removed as a member
// gets its clean stop: it reports what it still owes before it goes. A
// stop that fails does not hold the removal up.
func (d *Driver) Remove(ctx context.Context, ref nodeapi.ContainerRef) error {
	ids, err := d.find(ctx, ref)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := d.RemoveContainer(ctx, id, ref.TimeoutSec); err != nil {
			return err
		}
	}
	return nil
}

// RemoveContainer removes one container with its anonymous volumes, after
// a graceful stop when timeoutSec > 0 (SIGTERM, then SIGKILL after
// timeoutSec; a stop that fails does not hold the removal up). Removing
// what is already gone succeeds.
func (d *Driver) RemoveContainer(ctx context.Context, id string, timeoutSec int) error {
	if timeoutSec > 0 {
		_, _ = d.C.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &timeoutSec})
	}
	if _, err := d.C.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// Inspect reports the referenced workloads with their last log lines.
func (d *Driver) Inspect(ctx context.Context, ref nodeapi.ContainerRef, tail int) ([]nodeapi.Workload, []string, error) {
	ids, err := d.find(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	if len(ids) == 0 {
		return nil, nil, fail(nodeapi.ReasonNotFound, "no gpuaas container matches")
	}
	var ws []nodeapi.Workload
	var logs []string
	for _, id := range ids {
		ins, err := d.C.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			continue
		}
		w := nodeapi.Workload{ContainerID: id, Name: strings.TrimPrefix(ins.Container.Name, "/"),
			InstanceID: ins.Container.Config.Labels[nodeapi.LabelInstance], TaskID: ins.Container.Config.Labels[nodeapi.LabelTask],
			ComposeProject: ins.Container.Config.Labels["com.docker.compose.project"]}
		if st := ins.Container.State; st != nil {
			w.State = string(st.Status)
			w.StartedAt = startedAt(st.StartedAt)
		}
		ws = append(ws, w)
		logs = append(logs, d.LogTail(ctx, id, tail)...)
	}
	return ws, logs, nil
}

// Verify lists what still exists for an instance: labelled containers,
// networks and volumes, and its scratch path. With names, it lists only
// which of the instance's containers of those names remain (a removed
// member's), whatever else of the instance runs.
func (d *Driver) Verify(ctx context.Context, instanceID string, names []string) ([]string, error) {
	if instanceID == "" {
		return nil, fail(nodeapi.ReasonInvalidTask, "teardown.verify needs an instance id")
	}
	f := d.Managed(nodeapi.LabelInstance + "=" + instanceID)
	remaining := []string{}
	cs, err := d.C.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	for _, c := range cs.Items {
		if names != nil && (len(c.Names) == 0 || !slices.Contains(names, strings.TrimPrefix(c.Names[0], "/"))) {
			continue
		}
		remaining = append(remaining, "container:"+c.ID)
	}
	if names != nil {
		return remaining, nil
	}
	ns, err := d.C.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return nil, err
	}
	for _, n := range ns.Items {
		remaining = append(remaining, "network:"+n.Name)
	}
	vs, err := d.C.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return nil, err
	}
	for _, v := range vs.Items {
		remaining = append(remaining, "volume:"+v.Name)
	}
	if _, err := os.Stat(d.instanceDir(instanceID)); err == nil {
		remaining = append(remaining, "path:"+d.instanceDir(instanceID))
	}
	return remaining, nil
}

// startedAt parses the engine's start time; a container never started
// ("0001-01-01T00:00:00Z") or an unreadable time gives the zero time.
func startedAt(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 2000 {
		return time.Time{}
	}
	return t.UTC()
}
