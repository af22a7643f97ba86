package agent

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
	"github.com/gpuaas/gpuaas/internal/agent/engine"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// engineAgent is an agent on the real engine (engine.New) beside a real
// server whose registry holds the test images; pulls unwrap their
// credentials through that server. Its prune grace has passed by the next
// pass, so a pass removes every pulled image no container uses and no
// hold keeps.
type engineAgent struct {
	t     *testing.T
	a     *Agent
	dk    agenttest.Docker
	s     *servertest.Server
	admin *servertest.Client
	// beforeUnwrap, when set, runs as a pull asks for its credentials,
	// before the engine pulls: a pruner pass may come in between.
	beforeUnwrap func()
}

func newEngineAgent(t *testing.T) *engineAgent {
	dk := agenttest.RequireDocker(t)
	t.Cleanup(dk.RemoveImages)
	s := servertest.Start(t, store.SQLite)
	e := &engineAgent{t: t, dk: dk, s: s, admin: s.Admin()}
	unwrap := func(_ context.Context, tok string) (driver.Credentials, error) {
		if e.beforeUnwrap != nil {
			e.beforeUnwrap()
		}
		r := e.admin.Do("POST", "/api/v1/apps/registry/unwrap", map[string]string{"wrapping_token": tok}).Want(t, 200)
		return driver.Credentials{Username: r.String("username"), Password: r.String("password"), Registry: r.String("registry")}, nil
	}
	a, err := New(Config{Server: "http://127.0.0.1:1", DataDir: t.TempDir(), ImagePruneGrace: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Driver: func(cfg driver.Config) (driver.Driver, error) { cfg.Unwrap = unwrap; return engine.New(cfg) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	a.drv.SetNodeID("holds-" + uuid.NewString()[:8]) // its orphan pass looks at its own containers only
	e.a = a
	return e
}

// push pushes the test server image as a new app and returns its pull
// with a fresh wrapping token.
func (e *engineAgent) push(prefix string) nodeapi.ImagePull {
	img := agenttest.PushServerImage(e.t, e.dk, e.s, e.admin, prefix+strings.ReplaceAll(uuid.NewString()[:8], "-", ""))
	return nodeapi.ImagePull{Repository: img.Repository, Digest: img.Digest, WrappingToken: agenttest.PullToken(e.t, e.s, e.admin, img.ArtifactID)}
}

func (e *engineAgent) ok(tk nodeapi.Task) {
	e.t.Helper()
	if res := e.a.execute(context.Background(), tk); res.State != nodeapi.ResultSucceeded {
		e.t.Fatalf("%s %s: %s %s", tk.Kind, tk.ID, res.ReasonCode, res.Message)
	}
}

// prune makes two pruner passes (the first one starts the idle clock of
// an image it sees for the first time).
func (e *engineAgent) prune() {
	e.t.Helper()
	for range 2 {
		if err := e.a.reconcileOnce(context.Background()); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *engineAgent) onEngine(ref string) bool {
	_, err := e.a.drv.(*engine.Docker).C.ImageInspect(context.Background(), ref)
	return err == nil
}

// On the real engine: a container.run that fails before it creates its
// container (its host port is taken) leaves the hold the instance's
// image.pull took, so the pruner keeps the image for the retry; the retry
// that creates its container ends the pull's hold.
func TestFailedRunLeavesAPullsHoldOnTheEngine(t *testing.T) {
	e := newEngineAgent(t)
	img := e.push("holdpull")
	ref := img.Repository + "@" + img.Digest
	inst := "inst-" + uuid.NewString()[:8]
	t.Cleanup(func() {
		e.a.execute(context.Background(), task(t, "rm-"+inst, nodeapi.KindContainerRemove, inst, nodeapi.ContainerRef{}))
	})
	e.ok(task(t, "pull-"+inst, nodeapi.KindImagePull, inst, img))
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := busy.Addr().(*net.TCPAddr).Port
	run := nodeapi.ContainerRun{Name: "gpuaas-" + inst, Image: nodeapi.ImagePull{Repository: img.Repository, Digest: img.Digest},
		Ports: []nodeapi.PortMapping{{Container: 8080, Host: port}}}
	if res := e.a.execute(context.Background(), task(t, "run-1-"+inst, nodeapi.KindContainerRun, inst, run)); res.State != nodeapi.ResultFailed {
		t.Fatalf("run on a taken host port: %+v", res)
	}
	e.prune()
	if !e.onEngine(ref) {
		t.Fatalf("a failed run ended the hold the instance's image.pull took: the pruner removed %s before the retry", ref)
	}
	busy.Close()
	e.ok(task(t, "run-2-"+inst, nodeapi.KindContainerRun, inst, run))
	if e.a.holds.Held(ref) {
		t.Fatal("the pull's hold outlived the run that created its container from the image")
	}
}

// On the real engine: a compose.up whose project names an image its task
// does not list (here one an earlier instance pulled, idle and unheld, so
// Up finds it on the engine) holds it for the run. A pruner pass while Up
// pulls the next, listed image leaves it, and the project comes up.
func TestComposeUpHoldsTheImagesItDoesNotListOnTheEngine(t *testing.T) {
	e := newEngineAgent(t)
	side, web := e.push("holdside"), e.push("holdweb")
	sideRef := side.Repository + "@" + side.Digest
	old, inst := "inst-"+uuid.NewString()[:8], "inst-"+uuid.NewString()[:8]
	project := "gpuaas-" + inst
	t.Cleanup(func() {
		e.a.execute(context.Background(), task(t, "down-"+inst, nodeapi.KindComposeDown, inst, nodeapi.ComposeDown{Project: project}))
	})
	// The earlier instance pulled the side image and is gone.
	e.ok(task(t, "pull-"+old, nodeapi.KindImagePull, old, side))
	e.ok(task(t, "rm-"+old, nodeapi.KindContainerRemove, old, nodeapi.ContainerRef{}))
	pruned := false
	e.beforeUnwrap = func() {
		if !pruned {
			pruned = true
			e.prune()
		}
	}
	// Up pulls in service name order: sidecar (found on the engine), then
	// web, whose credentials are unwrapped first.
	yaml := "services:\n  sidecar:\n    image: " + sideRef + "\n  web:\n    image: " + web.Repository + "@" + web.Digest + "\n    ports: [\"8080\"]\n"
	up := nodeapi.ComposeUp{Project: project, YAML: []byte(yaml), Service: "web", Images: []nodeapi.ImagePull{web},
		Readiness: &nodeapi.Readiness{Port: 8080, HTTPPath: "/", TimeoutSeconds: 30}}
	if res := e.a.execute(context.Background(), task(t, "up-"+inst, nodeapi.KindComposeUp, inst, up)); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("compose.up: %s %s (the pruner removed an image a service names but the task does not list, between Up finding it and creating its container)", res.ReasonCode, res.Message)
	}
	if !pruned {
		t.Fatal("no pruner pass came during Up: web's pull asked for no credentials")
	}
	if e.a.holds.Held(sideRef) {
		t.Fatal("the run's hold on its unlisted image outlived the run")
	}
}
