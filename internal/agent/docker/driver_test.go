package docker_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/agent/docker"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

type env struct {
	s     *servertest.Server
	admin *servertest.Client
	d     *docker.Driver
	img   agenttest.Image
	node  string
	dir   string // the driver's DataDir
}

func setup(t *testing.T) env {
	dk := agenttest.RequireDocker(t)
	t.Cleanup(dk.RemoveImages)
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	app := "drv" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	img := agenttest.PushServerImage(t, dk, s, admin, app)
	node := "test-node-" + uuid.NewString()[:8]
	dir := t.TempDir()
	d, err := docker.New(docker.Config{NodeID: node, DataDir: dir, Unwrap: func(ctx context.Context, tok string) (docker.Credentials, error) {
		r := admin.Do("POST", "/api/v1/apps/registry/unwrap", map[string]string{"wrapping_token": tok}).Want(t, 200)
		return docker.Credentials{Username: r.String("username"), Password: r.String("password"), Registry: r.String("registry")}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever a failed test left labelled for this node goes.
		res, _ := d.C.ContainerList(context.Background(), client.ContainerListOptions{All: true,
			Filters: client.Filters{}.Add("label", nodeapi.LabelNode+"="+node)})
		for _, c := range res.Items {
			d.C.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		}
		d.Close()
	})
	return env{s: s, admin: admin, d: d, img: img, node: node, dir: dir}
}

func (e env) pull(t *testing.T) nodeapi.ImagePull {
	return nodeapi.ImagePull{Repository: e.img.Repository, Digest: e.img.Digest, WrappingToken: agenttest.PullToken(t, e.s, e.admin, e.img.ArtifactID)}
}

// The driver's whole path on the real engine: pull by digest with real pull
// credentials, run with ownership labels, a platform-owned file and an HTTP
// readiness probe on a host-local port, inspect, stop, remove, and a
// teardown check that finds nothing left.
func TestRunPullReadinessStopRemove(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	inst := "inst" + uuid.NewString()[:8]
	name := "gpuaas-test-" + inst
	run := nodeapi.ContainerRun{Name: name, Image: e.pull(t), Env: map[string]string{"PORT": "9000", "SECRET_TOKEN": "s3cret"},
		Ports:     []nodeapi.PortMapping{{Container: 9000}},
		Mounts:    []nodeapi.Mount{{Kind: "file", Target: "/etc/app/config.txt", Content: []byte("hello config")}, {Kind: "scratch", Target: "/scratch"}},
		MemoryMiB: 64, CPUCores: 0.5, Labels: map[string]string{"gpuaas.app_slug": "demo", "other": "dropped"},
		Readiness: &nodeapi.Readiness{Port: 9000, HTTPPath: "/", TimeoutSeconds: 30}}
	out, err := e.d.Run(ctx, docker.Owner{TaskID: "task-" + inst, InstanceID: inst, ProjectID: e.s.Creds.ProjectID}, run)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(out.ContainerIDs) != 1 || out.HostAddress != "127.0.0.1" || len(out.Ports) != 1 || out.Ports[0].Host == 0 || out.ImageDigest != e.img.Digest ||
		!slices.Equal(out.ImageDigests, []string{e.img.Digest}) {
		t.Fatalf("output %+v", out)
	}
	id := out.ContainerIDs[0]
	ins, err := e.d.C.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := ins.Container.Config.Labels
	if l[nodeapi.LabelManaged] != "true" || l[nodeapi.LabelInstance] != inst || l[nodeapi.LabelNode] != e.node || l[nodeapi.LabelApp] != "demo" || l["other"] != "" {
		t.Fatalf("labels %v", l)
	}
	for k, v := range l {
		if strings.Contains(k+v, "s3cret") {
			t.Fatalf("a secret reached the labels: %s=%s", k, v)
		}
	}
	hc := ins.Container.HostConfig
	if hc.Memory != 64<<20 || hc.NanoCPUs != 5e8 || len(hc.DeviceRequests) != 0 {
		t.Fatalf("resources %+v", hc.Resources)
	}
	for _, b := range hc.PortBindings {
		if b[0].HostIP.String() != "127.0.0.1" {
			t.Fatalf("published on %s", b[0].HostIP)
		}
	}
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(out.Ports[0].Host) + "/file?path=/etc/app/config.txt")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello config" {
		t.Fatalf("mounted file reads %q", body)
	}
	// A re-delivered run adopts the container it started.
	again, err := e.d.Run(ctx, docker.Owner{TaskID: "task-" + inst, InstanceID: inst}, run)
	if err != nil || again.ContainerIDs[0] != id {
		t.Fatalf("re-run: %v %+v", err, again)
	}
	ws, logs, err := e.d.Inspect(ctx, nodeapi.ContainerRef{InstanceID: inst}, 10)
	if err != nil || len(ws) != 1 || ws[0].State != "running" || ws[0].StartedAt.IsZero() || !slices.Contains(logs, "listening on 9000") {
		t.Fatalf("inspect: %v %+v %q", err, ws, logs)
	}
	if rem, _ := e.d.Verify(ctx, inst, nil); len(rem) != 2 {
		t.Fatalf("before teardown, remaining %v", rem)
	}
	if err := e.d.Stop(ctx, nodeapi.ContainerRef{InstanceID: inst, TimeoutSec: 5}); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Remove(ctx, nodeapi.ContainerRef{InstanceID: inst}); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RemoveInstanceDir(inst); err != nil {
		t.Fatal(err)
	}
	if rem, err := e.d.Verify(ctx, inst, nil); err != nil || len(rem) != 0 {
		t.Fatalf("after teardown: %v %v", err, rem)
	}
	// Stopping and removing what is gone succeeds.
	if err := e.d.Remove(ctx, nodeapi.ContainerRef{InstanceID: inst}); err != nil {
		t.Fatal(err)
	}
}

// A removal with a timeout is the workload's clean stop first: the engine
// sends SIGTERM (and the process, which exits on it, gets no SIGKILL);
// without a timeout it is killed at once.
func TestRemoveStopsGracefully(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	signals := func(inst string, remove nodeapi.ContainerRef) []string {
		t.Helper()
		out, err := e.d.Run(ctx, docker.Owner{TaskID: "t-" + inst, InstanceID: inst}, nodeapi.ContainerRun{Name: "gpuaas-test-" + inst, Image: e.pull(t),
			Env: map[string]string{"PORT": "9000"}, Ports: []nodeapi.PortMapping{{Container: 9000}}, Readiness: &nodeapi.Readiness{Port: 9000, HTTPPath: "/", TimeoutSeconds: 30}})
		if err != nil {
			t.Fatal(err)
		}
		watch, stop := context.WithCancel(ctx)
		defer stop()
		evs := e.d.C.Events(watch, client.EventsListOptions{Filters: client.Filters{}.Add("type", "container").Add("container", out.ContainerIDs[0])})
		time.Sleep(200 * time.Millisecond) // the subscription is in place before the removal
		if err := e.d.Remove(ctx, remove); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			select {
			case m := <-evs.Messages:
				switch m.Action {
				case "kill":
					got = append(got, m.Actor.Attributes["signal"])
				case "destroy":
					return got
				}
			case err := <-evs.Err:
				t.Fatalf("events: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatalf("no destroy event; kill signals so far %v", got)
			}
		}
	}
	inst := "inst" + uuid.NewString()[:8]
	if got := signals(inst, nodeapi.ContainerRef{InstanceID: inst, TimeoutSec: 10}); !slices.Equal(got, []string{"15"}) {
		t.Fatalf("a removal with a timeout sent signals %v, want SIGTERM only", got)
	}
	inst = "inst" + uuid.NewString()[:8]
	if got := signals(inst, nodeapi.ContainerRef{InstanceID: inst}); !slices.Equal(got, []string{"9"}) {
		t.Fatalf("a removal without a timeout sent signals %v, want SIGKILL", got)
	}
}

// A container that dies before it is ready fails the run with
// container_exited and its last log lines; a readiness port nothing listens
// on times out with readiness_timeout; a digest the registry lacks fails the pull.
func TestRunFailures(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	inst := "inst" + uuid.NewString()[:8]
	_, err := e.d.Run(ctx, docker.Owner{TaskID: "t1-" + inst, InstanceID: inst}, nodeapi.ContainerRun{Name: "gpuaas-test-exit-" + inst, Image: e.pull(t),
		Env: map[string]string{"EXIT_AT_ONCE": "1"}, Ports: []nodeapi.PortMapping{{Container: 8080}}, Readiness: &nodeapi.Readiness{Port: 8080, TimeoutSeconds: 20}})
	f := docker.AsFailure(err)
	if f.Reason != nodeapi.ReasonContainerExited || !slices.Contains(f.LogTail, "exiting as told") {
		t.Fatalf("exit: %+v", f)
	}
	_, err = e.d.Run(ctx, docker.Owner{TaskID: "t2-" + inst, InstanceID: inst}, nodeapi.ContainerRun{Name: "gpuaas-test-slow-" + inst, Image: e.pull(t),
		Ports: []nodeapi.PortMapping{{Container: 8081}}, Readiness: &nodeapi.Readiness{Port: 8081, TimeoutSeconds: 1}})
	// The message says what the last probe saw: nothing listening on 8081.
	if f := docker.AsFailure(err); f.Reason != nodeapi.ReasonReadinessTimeout || !strings.Contains(f.Message, "the last probe: TCP ") {
		t.Fatalf("timeout: %+v", f)
	}
	// command replaces the image's entrypoint: a binary the image lacks
	// fails the run with container_exited, never a container that runs the
	// image's entrypoint with the command as its arguments.
	_, err = e.d.Run(ctx, docker.Owner{TaskID: "t3-" + inst, InstanceID: inst}, nodeapi.ContainerRun{Name: "gpuaas-test-nobin-" + inst, Image: e.pull(t),
		Command: []string{"/no-such-binary"}, Ports: []nodeapi.PortMapping{{Container: 8082}}, Readiness: &nodeapi.Readiness{Port: 8082, TimeoutSeconds: 20}})
	if f := docker.AsFailure(err); f.Reason != nodeapi.ReasonContainerExited || !strings.Contains(f.Message, "no-such-binary") {
		t.Fatalf("missing binary: %+v", f)
	}
	// command and args: the entrypoint and its arguments (the port to listen on).
	out, err := e.d.Run(ctx, docker.Owner{TaskID: "t4-" + inst, InstanceID: inst + "b"}, nodeapi.ContainerRun{Name: "gpuaas-test-args-" + inst, Image: e.pull(t),
		Command: []string{"/srv"}, Args: []string{"8083"}, Ports: []nodeapi.PortMapping{{Container: 8083}}, Readiness: &nodeapi.Readiness{Port: 8083, TimeoutSeconds: 20}})
	if err != nil || len(out.ContainerIDs) != 1 {
		t.Fatalf("command and args: %v %+v", err, out)
	}
	if err := e.d.Remove(ctx, nodeapi.ContainerRef{InstanceID: inst + "b"}); err != nil {
		t.Fatal(err)
	}
	p := e.pull(t)
	p.Digest = "sha256:" + strings.Repeat("0", 64)
	if _, err := e.d.Pull(ctx, p); docker.AsFailure(err).Reason != nodeapi.ReasonImagePullFailed {
		t.Fatalf("missing digest: %v", err)
	}
	if _, err := e.d.Pull(ctx, nodeapi.ImagePull{Repository: e.img.Repository + ":latest", Digest: e.img.Digest}); docker.AsFailure(err).Reason != nodeapi.ReasonInvalidTask {
		t.Fatalf("tag ref: %v", err)
	}
	if err := e.d.Remove(ctx, nodeapi.ContainerRef{InstanceID: inst}); err != nil {
		t.Fatal(err)
	}
}

// A labelled container of this node that no known task started is removed
// once the grace has passed and reported; a container without the gpuaas
// label is never touched; a known one is adopted.
func TestReconcileOrphans(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ref, err := e.d.Pull(ctx, e.pull(t))
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name string, labels map[string]string) string {
		r, err := e.d.C.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: &container.Config{Image: ref, Labels: labels}})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	sfx := uuid.NewString()[:8]
	orphan := mk("gpuaas-test-orphan-"+sfx, e.d.Labels(docker.Owner{TaskID: "unknown-" + sfx}, nil))
	known := mk("gpuaas-test-known-"+sfx, e.d.Labels(docker.Owner{TaskID: "known-" + sfx}, nil))
	plain := mk("gpuaas-test-plain-"+sfx, map[string]string{"app": "not ours"})
	t.Cleanup(func() { e.d.C.ContainerRemove(context.Background(), plain, client.ContainerRemoveOptions{Force: true}) })
	now := time.Now()
	r := &docker.Reconciler{D: e.d, Grace: time.Minute, Now: func() time.Time { return now },
		Known: func(w nodeapi.Workload) bool { return w.TaskID == "known-"+sfx }}
	res, err := r.Run(ctx)
	if err != nil || len(res.Removed) != 0 || len(res.Adopted) != 1 || res.Adopted[0].ContainerID != known {
		t.Fatalf("first pass: %v %+v", err, res)
	}
	now = now.Add(2 * time.Minute)
	res, err = r.Run(ctx)
	if err != nil || len(res.Removed) != 1 || res.Removed[0].ContainerID != orphan {
		t.Fatalf("after grace: %v %+v", err, res)
	}
	for _, id := range []string{known, plain} {
		if _, err := e.d.C.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err != nil {
			t.Fatalf("%s was touched: %v", id, err)
		}
	}
	if _, err := e.d.C.ContainerInspect(ctx, orphan, client.ContainerInspectOptions{}); err == nil {
		t.Fatal("orphan still exists")
	}
}

// The images the driver pulled are pruned once no container has used them
// for the grace (an instance decommissioned), never while a container, even
// a stopped one, still uses them; the record of what was pulled survives a
// restart of the driver.
func TestImagePruner(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ref, err := e.d.Pull(ctx, e.pull(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.d.PulledImages(); !slices.Equal(got, []string{ref}) {
		t.Fatalf("pulled %v, want [%s]", got, ref)
	}
	restarted, err := docker.New(docker.Config{NodeID: e.node, DataDir: e.dir})
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close()
	if got := restarted.PulledImages(); !slices.Equal(got, []string{ref}) {
		t.Fatalf("after a restart the record holds %v", got)
	}
	clock := time.Now().Add(time.Minute)
	p := &docker.ImagePruner{D: e.d, Grace: 5 * time.Minute, Now: func() time.Time { return clock }}
	inst := "inst" + uuid.NewString()[:8]
	if _, err := e.d.Run(ctx, docker.Owner{TaskID: "t-" + inst, InstanceID: inst}, nodeapi.ContainerRun{Name: "gpuaas-test-prune-" + inst, Image: e.pull(t)}); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Stop(ctx, nodeapi.ContainerRef{InstanceID: inst, TimeoutSec: 1}); err != nil {
		t.Fatal(err)
	}
	// In use by a stopped container, long past the grace: kept.
	for range 2 {
		if removed, err := p.Run(ctx); err != nil || len(removed) != 0 {
			t.Fatalf("pruned an image in use: %v %v", removed, err)
		}
		clock = clock.Add(time.Hour)
	}
	// Decommissioned: kept within the grace, removed after it.
	if err := e.d.Remove(ctx, nodeapi.ContainerRef{InstanceID: inst}); err != nil {
		t.Fatal(err)
	}
	if removed, err := p.Run(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("pruned at once: %v %v", removed, err)
	}
	clock = clock.Add(4 * time.Minute)
	if removed, err := p.Run(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("pruned within the grace: %v %v", removed, err)
	}
	clock = clock.Add(2 * time.Minute)
	if removed, err := p.Run(ctx); err != nil || !slices.Equal(removed, []string{ref}) {
		t.Fatalf("not pruned after the grace: %v %v", removed, err)
	}
	if _, err := e.d.C.ImageInspect(ctx, ref); err == nil {
		t.Fatalf("%s is still on the engine", ref)
	}
	if got := e.d.PulledImages(); len(got) != 0 {
		t.Fatalf("record after pruning: %v", got)
	}
}

// An agent killed once the engine holds a pulled image but before the pull
// task finished: the redelivered task finds the digest on the engine, and
// the image must still be in the record of what the agent pulled, or the
// pruner never removes it (many GB left on the host for ever).
func TestImagePullKilledMidwayStaysRecorded(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	killed := errors.New("agent killed")
	docker.SetAfterEnginePull(e.d, func(string) error { return killed })
	if _, err := e.d.Pull(ctx, e.pull(t)); !errors.Is(err, killed) {
		t.Fatalf("first pull: %v, want the simulated kill", err)
	}
	restarted, err := docker.New(docker.Config{NodeID: e.node, DataDir: e.dir})
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close()
	ref, err := restarted.Pull(ctx, e.pull(t)) // the task, redelivered
	if err != nil {
		t.Fatal(err)
	}
	if got := restarted.PulledImages(); !slices.Equal(got, []string{ref}) {
		t.Fatalf("after the redelivered pull the record holds %v, want [%s]: the image would never be pruned", got, ref)
	}
	clock := time.Now().Add(time.Minute)
	p := &docker.ImagePruner{D: restarted, Grace: 5 * time.Minute, Now: func() time.Time { return clock }}
	if removed, err := p.Run(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("pruned at once: %v %v", removed, err)
	}
	clock = clock.Add(6 * time.Minute)
	if removed, err := p.Run(ctx); err != nil || !slices.Equal(removed, []string{ref}) {
		t.Fatalf("not pruned after the grace: %v %v", removed, err)
	}
}

// A reference is recorded before its pull: while the pull runs the pruner
// neither removes the image (the engine may hold it before Pull returns)
// nor forgets the reference, however long the pull takes; the grace counts
// from the end of the pull.
func TestImagePrunerSparesAPullInProgress(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	clock := time.Now().Add(time.Hour)
	p := &docker.ImagePruner{D: e.d, Grace: time.Minute, Now: func() time.Time { return clock }}
	var midway []string
	docker.SetAfterEnginePull(e.d, func(ref string) error {
		if got := e.d.PulledImages(); !slices.Equal(got, []string{ref}) {
			t.Errorf("mid-pull the record holds %v, want [%s]", got, ref)
		}
		for range 3 {
			removed, err := p.Run(ctx)
			if err != nil {
				return err
			}
			midway = append(midway, removed...)
			clock = clock.Add(time.Hour)
		}
		return nil
	})
	ref, err := e.d.Pull(ctx, e.pull(t))
	if err != nil || len(midway) != 0 {
		t.Fatalf("pull: %v; pruned mid-pull: %v", err, midway)
	}
	if got := e.d.PulledImages(); !slices.Equal(got, []string{ref}) {
		t.Fatalf("after the pull the record holds %v", got)
	}
	if removed, err := p.Run(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("pruned at once after the pull: %v %v", removed, err)
	}
	clock = clock.Add(2 * time.Minute)
	if removed, err := p.Run(ctx); err != nil || !slices.Equal(removed, []string{ref}) {
		t.Fatalf("not pruned after the grace: %v %v", removed, err)
	}
}

// The instance's identity file is readable by its workload whatever user
// the image runs as, and by no other user on the host: root:FileGroup,
// mode 0440, and only the instance's containers join that group.
func TestIdentityFileReadableByTheWorkloadOnly(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	dk := agenttest.RequireDocker(t)
	t.Cleanup(dk.RemoveImages)
	app := "nr" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	img := agenttest.PushServerImageAs(t, dk, e.s, e.admin, app, "65534:65534")
	pull := nodeapi.ImagePull{Repository: img.Repository, Digest: img.Digest, WrappingToken: agenttest.PullToken(t, e.s, e.admin, img.ArtifactID)}
	inst := "inst" + uuid.NewString()[:8]
	const target = "/var/run/gpuaas/identity.json"
	secret := `{"private_key":"s3cret-` + inst + `"}`
	out, err := e.d.Run(ctx, docker.Owner{TaskID: "t-" + inst, InstanceID: inst}, nodeapi.ContainerRun{Name: "gpuaas-test-ident-" + inst, Image: pull,
		Ports: []nodeapi.PortMapping{{Container: 8080}}, Readiness: &nodeapi.Readiness{Port: 8080, TimeoutSeconds: 30},
		Mounts: []nodeapi.Mount{{Kind: "file", Target: target, Content: []byte(secret), Mode: 0o444, ReadOnly: true}}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Cleanup(func() { _ = e.d.Remove(context.Background(), nodeapi.ContainerRef{InstanceID: inst}) })
	read := func(port uint16) (int, string) {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(int(port)) + "/file?path=" + target)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := read(uint16(out.Ports[0].Host)); code != 200 || body != secret {
		t.Fatalf("the non-root workload cannot read its identity: %d %q", code, body)
	}
	ins, err := e.d.C.ContainerInspect(ctx, out.ContainerIDs[0], client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	group := strconv.Itoa(docker.FileGroup(inst))
	if !slices.Equal(ins.Container.HostConfig.GroupAdd, []string{group}) {
		t.Fatalf("group_add %v, want [%s]", ins.Container.HostConfig.GroupAdd, group)
	}
	var src string
	for _, m := range ins.Container.Mounts {
		if m.Destination == target {
			src = m.Source
		}
	}
	st, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	// The task asked for 0444: the agent never lets other host users read it.
	if st.Mode().Perm() != 0o440 || strconv.Itoa(int(sys.Gid)) != group {
		t.Fatalf("host file %s: mode %v gid %d, want 0440 gid %s", src, st.Mode().Perm(), sys.Gid, group)
	}
	// Another container of the same user, outside the group, is refused.
	res, err := e.d.C.ContainerCreate(ctx, client.ContainerCreateOptions{Name: "gpuaas-test-ident-other-" + inst,
		Config: &container.Config{Image: img.Repository + "@" + img.Digest, Labels: map[string]string{nodeapi.LabelNode: e.node}, Cmd: []string{"8080"}},
		HostConfig: &container.HostConfig{PublishAllPorts: true,
			Mounts: []mount.Mount{{Type: mount.TypeBind, Source: src, Target: target, ReadOnly: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.C.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	ports, err := e.d.BoundPorts(ctx, res.ID)
	if err != nil || len(ports) == 0 {
		t.Fatalf("ports of the other container: %v %v", err, ports)
	}
	if err := e.d.WaitReady(ctx, res.ID, ports, &nodeapi.Readiness{Port: 8080, HTTPPath: "/", TimeoutSeconds: 20}); err != nil {
		t.Fatalf("the other container: %v", err)
	}
	code, body := read(uint16(ports[0].Host))
	if code == 200 || !strings.Contains(body, "permission denied") {
		t.Fatalf("a container outside the group read the identity: %d %q", code, body)
	}
}

// An image held for a run (the agent holds what it pulled for a run until
// the run created its container) stays past the grace, and the run then
// creates its container; once the hold is gone (the run came, or the
// longest hold passed) the grace counts again and the image goes.
func TestImagePrunerSparesHeldImages(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	held := true
	clock := time.Now().Add(time.Minute)
	p := &docker.ImagePruner{D: e.d, Grace: time.Minute, Now: func() time.Time { return clock }, Held: func(string) bool { return held }}
	ref, err := e.d.Pull(ctx, e.pull(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // hours pass between the pull task and the run
		if removed, err := p.Run(ctx); err != nil || len(removed) != 0 {
			t.Fatalf("pruned a held image: %v %v", removed, err)
		}
		clock = clock.Add(time.Hour)
	}
	inst := "inst" + uuid.NewString()[:8]
	if _, err := e.d.Run(ctx, docker.Owner{TaskID: "t-" + inst, InstanceID: inst}, nodeapi.ContainerRun{Name: "gpuaas-test-held-" + inst,
		Image: nodeapi.ImagePull{Repository: e.img.Repository, Digest: e.img.Digest}}); err != nil {
		t.Fatalf("run after the gap: %v", err)
	}
	if err := e.d.Remove(ctx, nodeapi.ContainerRef{InstanceID: inst}); err != nil {
		t.Fatal(err)
	}
	held = false // the longest hold passed
	if removed, err := p.Run(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("pruned at once after the hold: %v %v", removed, err)
	}
	clock = clock.Add(2 * time.Minute)
	if removed, err := p.Run(ctx); err != nil || !slices.Equal(removed, []string{ref}) {
		t.Fatalf("not pruned after the hold and the grace: %v %v", removed, err)
	}
}

// A run takes its hold after the pruner's look at Held: the removal goes
// through RemoveUnheld, which finds the hold, so the image stays on the
// engine and in the record, and its grace starts again.
func TestImagePrunerLooksAtHoldsAgainBeforeRemoving(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ref, err := e.d.Pull(ctx, e.pull(t))
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now().Add(time.Hour)
	heldNow := true // the hold taken between the look and the removal
	p := &docker.ImagePruner{D: e.d, Grace: time.Minute, Now: func() time.Time { return clock },
		Held: func(string) bool { return false },
		RemoveUnheld: func(_ string, remove func() error) (bool, error) {
			if heldNow {
				return true, nil
			}
			return false, remove()
		}}
	if removed, err := p.Run(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("first pass: %v %v", removed, err)
	}
	clock = clock.Add(2 * time.Minute)
	if removed, err := p.Run(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("removed an image a run held by the time of its removal: %v %v", removed, err)
	}
	if _, err := e.d.C.ImageInspect(ctx, ref); err != nil {
		t.Fatalf("%s is gone from the engine: %v", ref, err)
	}
	if got := e.d.PulledImages(); !slices.Equal(got, []string{ref}) {
		t.Fatalf("record after the spared removal: %v", got)
	}
	heldNow = false // the run ended; the grace counts from here
	if removed, err := p.Run(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("pruned at once after the hold: %v %v", removed, err)
	}
	clock = clock.Add(2 * time.Minute)
	if removed, err := p.Run(ctx); err != nil || !slices.Equal(removed, []string{ref}) {
		t.Fatalf("not pruned after the hold and the grace: %v %v", removed, err)
	}
}
