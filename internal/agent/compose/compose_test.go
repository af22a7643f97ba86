package compose_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/agent/compose"
	"github.com/gpuaas/gpuaas/internal/agent/docker"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/moby/moby/client"
)

// engineEnv is a driver on the real engine, the test server image in a
// real server's registry, and one instance's Compose project (brought down
// when the test ends).
type engineEnv struct {
	d             *docker.Driver
	img           agenttest.Image
	ref           string // the image pinned by digest
	inst, project string
	server        *servertest.Server
	admin         *servertest.Client
}

// pull is a pull of the image with a fresh single-use wrapping token.
func (e engineEnv) pull(t *testing.T) nodeapi.ImagePull {
	return nodeapi.ImagePull{Repository: e.img.Repository, Digest: e.img.Digest, WrappingToken: agenttest.PullToken(t, e.server, e.admin, e.img.ArtifactID)}
}

// setupEngine pushes the image as app prefix+random.
func setupEngine(t *testing.T, prefix string) engineEnv {
	dk := agenttest.RequireDocker(t)
	t.Cleanup(dk.RemoveImages)
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	img := agenttest.PushServerImage(t, dk, s, admin, prefix+strings.ReplaceAll(uuid.NewString()[:8], "-", ""))
	d, err := docker.New(docker.Config{NodeID: "compose-node", DataDir: t.TempDir(), Unwrap: func(ctx context.Context, tok string) (docker.Credentials, error) {
		r := admin.Do("POST", "/api/v1/apps/registry/unwrap", map[string]string{"wrapping_token": tok}).Want(t, 200)
		return docker.Credentials{Username: r.String("username"), Password: r.String("password"), Registry: r.String("registry")}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	inst := "inst" + uuid.NewString()[:8]
	e := engineEnv{d: d, img: img, ref: img.Repository + "@" + img.Digest, inst: inst, project: "gpuaas-" + inst, server: s, admin: admin}
	t.Cleanup(func() { compose.Down(context.Background(), d, e.project, inst) })
	return e
}

// A two-service project (web depends on db, db has a named volume) comes up
// on the real engine with the standard Compose labels and gpuaas labels,
// web answers its readiness probe on a host-local port, and down leaves
// nothing labelled for the instance.
func TestComposeUpDown(t *testing.T) {
	e := setupEngine(t, "cmp")
	d, img, ref, inst, project := e.d, e.img, e.ref, e.inst, e.project
	ctx := context.Background()
	yaml := `services:
  web:
    image: ` + ref + `
    ports: ["8080"]
    environment:
      UPSTREAM: db:9000
    depends_on: [db]
  db:
    image: ` + ref + `
    environment:
      PORT: "9000"
    volumes: ["data:/data"]
volumes:
  data: {}
`
	const identityPath = "/var/run/gpuaas/identity.json"
	identity := nodeapi.Mount{Kind: "file", Target: identityPath, Content: []byte(`{"key":"secret"}`), Mode: 0o444, ReadOnly: true, Services: []string{"web"}}
	up := nodeapi.ComposeUp{Project: project, YAML: []byte(yaml), Service: "web", Readiness: &nodeapi.Readiness{Port: 8080, HTTPPath: "/", TimeoutSeconds: 30},
		Images: []nodeapi.ImagePull{e.pull(t)}}
	// A file mount must name its services; one naming no service of the
	// project is refused before anything is created.
	for _, bad := range [][]string{nil, {"nope"}} {
		m := identity
		m.Services = bad
		u := up
		u.Mounts = []nodeapi.Mount{m}
		if _, err := compose.Up(ctx, d, docker.Owner{TaskID: "t-" + inst, InstanceID: inst}, u); docker.AsFailure(err) == nil || docker.AsFailure(err).Reason != nodeapi.ReasonInvalidTask {
			t.Fatalf("mount into %v: %v", bad, err)
		}
	}
	if rem, _ := d.Verify(ctx, inst, nil); len(rem) != 0 {
		t.Fatalf("a refused up left %v", rem)
	}
	up.Mounts = []nodeapi.Mount{identity}
	out, err := compose.Up(ctx, d, docker.Owner{TaskID: "t-" + inst, InstanceID: inst}, up)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	if len(out.ContainerIDs) != 2 || len(out.Ports) != 1 || out.Ports[0].Host == 0 || len(out.ImageDigests) != 1 || out.ImageDigests[0] != img.Digest {
		t.Fatalf("output %+v", out)
	}
	// db started first (depends_on order).
	first, err := d.C.ContainerInspect(ctx, out.ContainerIDs[0], client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := first.Container.Config.Labels
	if l[compose.LabelService] != "db" || l[compose.LabelProject] != project || l[compose.LabelNumber] != "1" || l[compose.LabelOneoff] != "False" ||
		l[compose.LabelConfigHash] == "" || l[nodeapi.LabelInstance] != inst || l[nodeapi.LabelManaged] != "true" {
		t.Fatalf("labels %v", l)
	}
	web, err := d.C.ContainerInspect(ctx, out.ContainerIDs[1], client.ContainerInspectOptions{})
	if err != nil || web.Container.Config.Labels[compose.LabelDependsOn] != "db:service_started:false" {
		t.Fatalf("web's depends_on label: %v %q", err, web.Container.Config.Labels[compose.LabelDependsOn])
	}
	// The identity file is bound read-only into web only, and web reads it.
	for _, id := range out.ContainerIDs {
		ins, err := d.C.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var binds []string
		for _, m := range ins.Container.Mounts {
			if m.Destination == identityPath {
				binds = append(binds, fmt.Sprintf("%s rw=%v", m.Type, m.RW))
			}
		}
		want := []string(nil)
		if ins.Container.Config.Labels[compose.LabelService] == "web" {
			want = []string{"bind rw=false"}
		}
		if !slices.Equal(binds, want) {
			t.Fatalf("%s: identity mounts %v, want %v", ins.Container.Config.Labels[compose.LabelService], binds, want)
		}
	}
	r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/file?path=%s", out.Ports[0].Host, identityPath))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(body) != `{"key":"secret"}` {
		t.Fatalf("web reads %d %q", r.StatusCode, body)
	}
	if rem, _ := d.Verify(ctx, inst, nil); len(rem) != 5 { // 2 containers, network, volume, the instance's path
		t.Fatalf("before down: %v", rem)
	}
	// Up again (re-delivery) adopts what runs.
	again, err := compose.Up(ctx, d, docker.Owner{TaskID: "t-" + inst, InstanceID: inst}, nodeapi.ComposeUp{Project: project, YAML: []byte(yaml), Service: "web"})
	if err != nil || again.ContainerIDs[0] != out.ContainerIDs[0] {
		t.Fatalf("up again: %v %+v", err, again)
	}
	// Down stops each service gracefully: the engine sends SIGTERM, and
	// these processes exit on it before any SIGKILL.
	watch, stop := context.WithCancel(ctx)
	defer stop()
	evs := d.C.Events(watch, client.EventsListOptions{Filters: client.Filters{}.Add("type", "container").Add("label", compose.LabelProject+"="+project)})
	time.Sleep(200 * time.Millisecond) // the subscription is in place before down
	if err := compose.Down(ctx, d, project, inst); err != nil {
		t.Fatal(err)
	}
	signals := map[string][]string{}
	var seq []string // service:action, in the engine's order
	for destroyed := 0; destroyed < 2; {
		select {
		case m := <-evs.Messages:
			switch m.Action {
			case "kill":
				signals[m.Actor.ID] = append(signals[m.Actor.ID], m.Actor.Attributes["signal"])
				seq = append(seq, m.Actor.Attributes[compose.LabelService]+":kill")
			case "destroy":
				destroyed++
				seq = append(seq, m.Actor.Attributes[compose.LabelService]+":destroy")
			}
		case err := <-evs.Err:
			t.Fatalf("events: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatalf("down: fewer than 2 containers destroyed; signals %v", signals)
		}
	}
	for id, sig := range signals {
		if !slices.Equal(sig, []string{"15"}) {
			t.Fatalf("container %s got signals %v on down, want SIGTERM only", id[:12], sig)
		}
	}
	if len(signals) != 2 {
		t.Fatalf("signals on down: %v, want SIGTERM to each of 2 containers", signals)
	}
	// In reverse depends_on order: web is gone before db is asked to stop.
	if want := []string{"web:kill", "web:destroy", "db:kill", "db:destroy"}; !slices.Equal(seq, want) {
		t.Fatalf("down's order: %v, want %v", seq, want)
	}
	if rem, err := d.Verify(ctx, inst, nil); err != nil || len(rem) != 0 {
		t.Fatalf("after down: %v %v", err, rem)
	}
}

// What the curated subset refuses.
func TestLoadRefuses(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("a", 64)
	for name, y := range map[string]string{
		"tag":        "services:\n  a:\n    image: reg/x:latest\n",
		"build":      "services:\n  a:\n    build: .\n    image: reg/x" + digest + "\n",
		"bind":       "services:\n  a:\n    image: reg/x" + digest + "\n    volumes: [\"/etc:/host\"]\n",
		"privileged": "services:\n  a:\n    image: reg/x" + digest + "\n    privileged: true\n",
		"hostnet":    "services:\n  a:\n    image: reg/x" + digest + "\n    network_mode: host\n",
		"garbage":    "services: [",
		// Keys compose-go acts on as it loads: each reads a file of the node.
		"env_file":    "services:\n  a:\n    image: reg/x" + digest + "\n    env_file: /etc/os-release\n",
		"env_file_v2": "services:\n  a:\n    image: reg/x" + digest + "\n    env_file: [{path: /etc/os-release}]\n",
		"label_file":  "services:\n  a:\n    image: reg/x" + digest + "\n    label_file: /etc/os-release\n",
		"extends":     "services:\n  a:\n    image: reg/x" + digest + "\n    extends: {file: /etc/compose.yaml, service: b}\n",
		"include":     "include: [/etc/compose.yaml]\nservices:\n  a:\n    image: reg/x" + digest + "\n",
		"merged":      "volumes:\n  v: &x {env_file: /etc/os-release}\nservices:\n  a:\n    <<: *x\n    image: reg/x" + digest + "\n",
		// Engine options outside the subset.
		"security_opt": "services:\n  a:\n    image: reg/x" + digest + "\n    security_opt: [\"seccomp=unconfined\"]\n",
		"no_new_privs": "services:\n  a:\n    image: reg/x" + digest + "\n    security_opt: [\"no-new-privileges:false\"]\n",
		"cap_add":      "services:\n  a:\n    image: reg/x" + digest + "\n    cap_add: [NET_RAW]\n",
		"cap_add_all":  "services:\n  a:\n    image: reg/x" + digest + "\n    cap_add: [ALL]\n",
		"cap_merged":   "volumes:\n  v: &x {cap_add: [NET_RAW], privileged: true}\nservices:\n  a:\n    <<: *x\n    image: reg/x" + digest + "\n",
		"volumes_from": "services:\n  a:\n    image: reg/x" + digest + "\n    volumes_from: [b]\n  b:\n    image: reg/x" + digest + "\n",
	} {
		if _, err := compose.Load(context.Background(), nodeapi.ComposeUp{Project: "p", YAML: []byte(y)}); docker.AsFailure(err) == nil || docker.AsFailure(err).Reason != nodeapi.ReasonInvalidTask {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := compose.Load(context.Background(), nodeapi.ComposeUp{Project: "Bad Name", YAML: []byte("services: {}")}); err == nil {
		t.Error("bad project name accepted")
	}
}
