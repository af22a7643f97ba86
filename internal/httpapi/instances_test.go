package httpapi_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// instanceEnv is a server with a project service account ("bot", role
// app_operator), an app whose versions are published from real images in
// the embedded registry, an entitlement, and a joined node with an
// allocation of the project.
type instanceEnv struct {
	s      *servertest.Server
	admin  *servertest.Client
	bot    *servertest.Client
	botKey client.KeyFile
	pid    string
	node   *simNode
	alloc  string
	// digests of the published versions
	digests map[string]string
}

func (e *instanceEnv) path(p string) string { return "/api/v1/projects/" + e.pid + p }

// newInstanceEnv builds the environment; images maps each version to the
// image to publish (nil: a random image, for simulated nodes).
func newInstanceEnv(t testing.TB, d store.Dialect, slug string, images map[string]v1.Image, manifestFor func(version, imageRef string) map[string]any, nodeGPUs int, opts ...servertest.Option) *instanceEnv {
	t.Helper()
	return setupInstanceEnv(t, servertest.Start(t, d, opts...), slug, images, manifestFor, nodeGPUs)
}

// setupInstanceEnv prepares an instanceEnv on a running server.
func setupInstanceEnv(t testing.TB, s *servertest.Server, slug string, images map[string]v1.Image, manifestFor func(version, imageRef string) map[string]any, nodeGPUs int) *instanceEnv {
	t.Helper()
	e := &instanceEnv{s: s, admin: s.Admin(), pid: s.Creds.ProjectID, digests: map[string]string{}}
	sa := e.admin.Do("POST", e.path("/service-accounts"), map[string]any{"name": "operator", "slug": "operator", "roles": []string{"app_operator"}}).Want(t, 201)
	e.botKey = client.KeyFile{Type: client.KeyFileType, ServiceAccountID: sa.String("id"), KeyID: sa.String("key_id"),
		PrivateKeyPEM: sa.String("private_key_pem"), TokenURL: sa.String("token_url")}
	e.bot = s.AsServiceAccount(e.botKey)
	versions := make([]string, 0, len(images))
	for v := range images {
		versions = append(versions, v)
	}
	slices.Sort(versions)
	for _, v := range versions {
		img := images[v]
		if img == nil {
			var err error
			if img, err = random.Image(512, 1); err != nil {
				t.Fatal(err)
			}
		}
		registry, repo, dg := e.publishArtifact(t, slug, v, "runtime", img)
		m := manifestFor(v, registry+"/"+repo+"@"+dg)
		e.admin.Do("POST", "/api/v1/admin/apps/manifests", m).Want(t, 200, 201)
		e.admin.Do("POST", "/api/v1/admin/apps/catalog/"+slug+"/versions/"+v+"/publish", map[string]string{"reason": "release"}).Want(t, 200)
		e.digests[v] = dg
	}
	if len(images) > 0 {
		e.admin.Do("PUT", e.path("/apps/entitlements/"+slug), map[string]any{"enabled": true}).Want(t, 200)
	}
	if nodeGPUs < 0 { // the caller brings its own node (a real agent)
		return e
	}
	e.node = joinSimNode(t, s, e.admin, "node-a", nodeGPUs)
	e.alloc = e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": nodeGPUs, "sku": fmt.Sprintf("test.%dx", max(nodeGPUs, 1)), "node_id": e.node.id}).Want(t, 201).String("id")
	return e
}

// publishArtifact pushes img for slug@version as artifactName through a
// publish intent, registers, verifies and promotes it to active; it returns
// the registry host, the repository and the digest.
func (e *instanceEnv) publishArtifact(t testing.TB, slug, v, artifactName string, img v1.Image) (string, string, string) {
	t.Helper()
	ctx := context.Background()
	pi := e.bot.Do("POST", e.path("/app-artifacts/publish-intents"), map[string]any{"app_slug": slug, "app_version": v, "artifact_name": artifactName, "channel": "dev"}).Want(t, 201)
	r := e.bot.Do("POST", "/api/v1/apps/registry/unwrap", map[string]string{"wrapping_token": wrapToken(pi)}).Want(t, 200)
	creds := regCreds{r.String("username"), r.String("password"), r.String("registry"), r.String("repository")}
	ref, _ := name.ParseReference(creds.registry + "/" + creds.repo + ":" + v)
	if err := remote.Write(ref, img, creds.opts(ctx)...); err != nil {
		t.Fatalf("push: %v", err)
	}
	// The push's parallel uploads can leave a connection dialled and never
	// used; the server counts such a new connection as busy for 5 seconds
	// and its graceful shutdown at cleanup waits for it.
	remote.DefaultTransport.(*http.Transport).CloseIdleConnections()
	dg, _ := img.Digest()
	mt, _ := img.MediaType()
	art := e.bot.Do("POST", e.path("/app-artifacts"), map[string]any{"app_slug": slug, "app_version": v, "artifact_name": artifactName,
		"repository": creds.repo, "digest": dg.String(), "tag": v, "media_type": string(mt)}).Want(t, 201).String("id")
	e.admin.Do("POST", e.path("/app-artifacts/"+art+"/verify"), map[string]string{"reason": "ci"}).Want(t, 200)
	for _, target := range []string{"staged", "canary", "active"} {
		e.admin.Do("POST", e.path("/app-artifacts/"+art+"/promote"), map[string]string{"target_state": target, "reason": "rollout"}).Want(t, 200)
	}
	return creds.registry, creds.repo, dg.String()
}

// modesManifest is echoManifest offering the operating modes and
// control-plane scopes given (supported_modes): a shared instance's app.
func modesManifest(slug string, modes, scopes []string) func(version, imageRef string) map[string]any {
	return func(version, imageRef string) map[string]any {
		m := echoManifest(slug)(version, imageRef)
		m["supported_modes"] = map[string]any{"operating_modes": modes, "control_plane_scopes": scopes}
		return m
	}
}

// newManagedEnv is an instance environment for the app "managed" (1.0.0),
// which may run tenant-dedicated or platform-managed, with its node
// answering every task.
func newManagedEnv(t testing.TB, d store.Dialect) *instanceEnv {
	t.Helper()
	manifest := modesManifest("managed", []string{"tenant_dedicated", "platform_managed"}, []string{"project", "platform"})
	e := newInstanceEnv(t, d, "managed", map[string]v1.Image{"1.0.0": nil}, manifest, 1)
	e.node.serve(t, okResult)
	return e
}

// echoManifest is a launchable_oci app listening on 8080.
func echoManifest(slug string) func(version, imageRef string) map[string]any {
	return func(version, imageRef string) map[string]any {
		repo, _, _ := strings.Cut(imageRef, "@")
		_, repo, _ = strings.Cut(repo, "/")
		return map[string]any{
			"slug": slug, "display_name": "Echo", "version": version, "runtime_backend": "launchable_oci",
			"supported_modes": map[string]any{"operating_modes": []string{"tenant_dedicated"}, "control_plane_scopes": []string{"project"}},
			"compatibility":   map[string]any{"requires_capacity_shape": []string{"gpu_slice", "baremetal"}, "supported_accelerators": []string{"nvidia", "cpu"}},
			"artifacts":       []map[string]any{{"name": "runtime", "artifact_kind": "oci", "source_type": "oci_registry", "repository": repo}},
			"runtime_profile": map[string]any{"kind": "launchable_oci", "image_ref": imageRef,
				"ports":     []map[string]any{{"container": 8080, "expose": "private_host_local"}},
				"readiness": map[string]any{"type": "http", "path": "/healthz", "port": 8080, "period_seconds": 1, "failure_threshold": 20},
				"resources": map[string]any{"gpu_count": map[string]any{"default": 0, "min": 0, "max": 2}},
				"parameters": map[string]any{"type": "object", "properties": map[string]any{
					"pip_packages": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}}},
		}
	}
}

// simNode is a node agent simulated over the real node API: it joins,
// beats, long-polls its tasks and reports results decided by the test. It
// runs no container; the real agent's walk is in the Docker tests.
type simNode struct {
	s      *servertest.Server
	id     string
	keyID  string
	tokURL string
	priv   ed25519.PrivateKey
	c      *servertest.Client

	mu        sync.Mutex
	decide    func(nodeapi.Task) nodeapi.TaskResult
	seen      []nodeapi.Task
	paused    bool               // a dead agent: no beats, no polls
	workloads []nodeapi.Workload // what its beats report running
}

// pause stops the node's beats and polls (its agent is "killed"); resume
// brings it back reporting workloads.
func (n *simNode) pause() { n.mu.Lock(); n.paused = true; n.mu.Unlock() }

func (n *simNode) resume(workloads []nodeapi.Workload) {
	n.mu.Lock()
	n.paused, n.workloads = false, workloads
	n.mu.Unlock()
}

func joinSimNode(t testing.TB, s *servertest.Server, admin *servertest.Client, nodeName string, gpus int) *simNode {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(pub)
	inv := nodeapi.Inventory{Hostname: nodeName, OS: "linux", Arch: "amd64", CPUCores: 16, MemoryMiB: 64000, GPUs: []nodeapi.GPU{}, Address: "10.1.2.3"}
	for i := range gpus {
		inv.GPUs = append(inv.GPUs, nodeapi.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", nodeName, i), Model: "NVIDIA H100 80GB HBM3", Vendor: "nvidia", MemoryMiB: 81559})
	}
	jt := admin.Do("POST", "/api/v1/admin/nodes/join-tokens", map[string]any{"description": "test"}).Want(t, 201).String("join_token")
	r := s.Anonymous().Do("POST", "/api/v1/nodes/join", nodeapi.JoinRequest{JoinToken: jt, Name: nodeName,
		PublicKeyPEM: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), Inventory: inv}).Want(t, 201)
	n := &simNode{s: s, id: r.String("node_id"), keyID: r.String("key_id"), tokURL: r.String("token_url"), priv: priv}
	now := time.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{Issuer: n.id, Subject: n.id, Audience: jwt.ClaimStrings{n.tokURL},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute)), ID: uuid.NewString()})
	tok.Header["kid"] = n.keyID
	signed, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	n.c = s.As(s.Anonymous().Do("POST", "/api/v1/nodes/token", nodeapi.TokenRequest{Assertion: signed}).Want(t, 200).String("access_token"))
	n.c.Do("POST", "/api/v1/nodes/"+n.id+"/heartbeat", nodeapi.Heartbeat{Workloads: []nodeapi.Workload{}}).Want(t, 200)
	return n
}

// serve executes every queued task with decide until the test ends. It
// talks plain HTTP (not the test client), so a server that is away — killed
// and restarting — is retried, not a test failure.
func (n *simNode) serve(t testing.TB, decide func(nodeapi.Task) nodeapi.TaskResult) {
	n.mu.Lock()
	n.decide = decide
	n.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	hc := &http.Client{Timeout: 10 * time.Second}
	call := func(method, path string, in, out any) error {
		var body io.Reader
		if in != nil {
			b, _ := json.Marshal(in)
			body = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, n.s.URL+path, body)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+n.c.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 300 {
			return fmt.Errorf("%s %s: %d", method, path, resp.StatusCode)
		}
		if out != nil {
			return json.NewDecoder(resp.Body).Decode(out)
		}
		return nil
	}
	// Heartbeats on a ticker of their own, as the real agent's: beaten
	// only between long polls, a loop slowed past the tests' short TTLs
	// (2 s + 1 s grace) by a loaded machine lost the node.
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		for ctx.Err() == nil {
			n.mu.Lock()
			paused, workloads := n.paused, append([]nodeapi.Workload{}, n.workloads...)
			n.mu.Unlock()
			if !paused {
				_ = call("POST", "/api/v1/nodes/"+n.id+"/heartbeat", nodeapi.Heartbeat{Workloads: workloads}, nil)
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	go func() {
		defer close(done)
		defer func() { <-beats }()
		for ctx.Err() == nil {
			n.mu.Lock()
			paused := n.paused
			n.mu.Unlock()
			if paused {
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			var list nodeapi.TaskList
			if err := call("GET", "/api/v1/nodes/"+n.id+"/tasks?wait_seconds=1", nil, &list); err != nil {
				select { // the server is away (restarting): retry shortly
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			for _, task := range list.Tasks {
				n.mu.Lock()
				n.seen = append(n.seen, task)
				decide := n.decide
				n.mu.Unlock()
				res := decide(task)
				if res.State == "" { // the test withholds this result (the node "lost" it)
					continue
				}
				_ = call("POST", "/api/v1/nodes/"+n.id+"/tasks/"+task.ID+"/result", res, nil)
			}
		}
	}()
}

func (n *simNode) tasks() []nodeapi.Task {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]nodeapi.Task(nil), n.seen...)
}

// okResult answers every task as a healthy node would.
func okResult(task nodeapi.Task) nodeapi.TaskResult {
	switch task.Kind {
	case nodeapi.KindContainerRun:
		var run nodeapi.ContainerRun
		_ = json.Unmarshal(task.Payload, &run)
		host := 31000
		if len(run.Ports) > 0 && run.Ports[0].Host > 0 {
			host = run.Ports[0].Host
		}
		digests, _ := nodeapi.PinnedDigests(task.Kind, task.Payload)
		out, _ := json.Marshal(nodeapi.RunOutput{ContainerIDs: []string{"c-" + task.ID[:8]}, Ports: []nodeapi.PortMapping{{Container: 8080, Host: host}},
			HostAddress: "10.1.2.3", ImageDigest: run.Image.Digest, ImageDigests: digests})
		return nodeapi.TaskResult{State: nodeapi.ResultSucceeded, Output: out}
	case nodeapi.KindComposeUp:
		digests, _ := nodeapi.PinnedDigests(task.Kind, task.Payload)
		out, _ := json.Marshal(nodeapi.RunOutput{ContainerIDs: []string{"c-" + task.ID[:8]}, Ports: []nodeapi.PortMapping{},
			HostAddress: "10.1.2.3", ImageDigests: digests})
		return nodeapi.TaskResult{State: nodeapi.ResultSucceeded, Output: out}
	case nodeapi.KindTeardownVerify:
		out, _ := json.Marshal(nodeapi.VerifyOutput{Remaining: []string{}})
		return nodeapi.TaskResult{State: nodeapi.ResultSucceeded, Output: out}
	}
	return nodeapi.TaskResult{State: nodeapi.ResultSucceeded}
}

// waitOp polls an operation until it ends.
func waitOp(t *testing.T, c *servertest.Client, pid, opID string) *servertest.Response {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		r := c.Do("GET", "/api/v1/projects/"+pid+"/operations/"+opID, nil).Want(t, 200)
		if r.String("state") != "in_progress" {
			return r
		}
		time.Sleep(50 * time.Millisecond) // polling an async API, as a client would
	}
	t.Fatalf("operation %s did not end", opID)
	return nil
}

// The whole lifecycle over the real API as a service account, with the
// real queue and a simulated node: create, upgrade, a failed upgrade that
// reverts by itself, rollback, decommission; the timeline and the event
// stream carry the seeds' types in order, one correlation id per request.
func TestInstanceLifecycleAPI(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		testInstanceLifecycleAPI(t, d)
	})
}

func testInstanceLifecycleAPI(t *testing.T, d store.Dialect) {
	e := newInstanceEnv(t, d, "echo", map[string]v1.Image{"1.0.0": nil, "2.0.0": nil, "3.0.0": nil}, echoManifest("echo"), 1)
	bad := e.digests["3.0.0"]
	e.node.serve(t, func(task nodeapi.Task) nodeapi.TaskResult {
		if task.Kind == nodeapi.KindContainerRun && strings.Contains(string(task.Payload), bad) {
			return nodeapi.TaskResult{State: nodeapi.ResultFailed, ReasonCode: nodeapi.ReasonContainerExited, Message: "exited with 3",
				LogTail: []string{"boom: this release exits before it is ready"}}
		}
		return okResult(task)
	})
	corr := map[string]string{}
	do := func(what, method, path string, body any) *servertest.Response {
		id := uuid.NewString()
		corr[what] = id
		return e.bot.Do(method, e.path(path), body, "X-Request-ID", id).Want(t, 202)
	}
	cr := do("create", "POST", "/app-instances", map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "my-first-app-instance",
		"operating_mode": "tenant_dedicated", "control_plane_scope": "project", "config": map[string]any{}})
	id := cr.String("id")
	if cr.String("status") != "requested" || cr.String("tenant_boundary_mode") != "project_isolated" || cr.String("runtime_backend") != "launchable_oci" || cr.String("operation_id") == "" {
		t.Fatalf("create: %s", cr.Body)
	}
	if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("create op: %s", op.Body)
	}
	got := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	if got.String("status") != "running" || got.String("digest") != e.digests["1.0.0"] || !strings.Contains(string(got.Body), "ssh -N -L") {
		t.Fatalf("running: %s", got.Body)
	}
	// The allocation was placed on: the run task names the node and carries
	// node-bound pull credentials; no private key in env.
	for _, task := range e.node.tasks() {
		if task.Kind == nodeapi.KindContainerRun {
			var run nodeapi.ContainerRun
			_ = json.Unmarshal(task.Payload, &run)
			if run.Image.WrappingToken == "" || run.Image.Digest != e.digests["1.0.0"] {
				t.Fatalf("run image: %+v", run.Image)
			}
			for k, v := range run.Env {
				if strings.Contains(v, "PRIVATE KEY") {
					t.Fatalf("private key in env %s", k)
				}
			}
			break
		}
	}

	up := do("upgrade", "POST", "/app-instances/"+id+"/upgrade", map[string]string{"target_version": "2.0.0"})
	// A second lifecycle request while one runs: 409 operation_in_progress.
	if r := e.bot.Do("POST", e.path("/app-instances/"+id+"/rollback"), map[string]string{"target_version": "1.0.0"}).Want(t, 409); r.ErrorCode() != "operation_in_progress" {
		t.Fatalf("concurrent request: %s", r.Body)
	}
	waitOp(t, e.bot, e.pid, up.String("operation_id"))
	if got := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); got.String("version") != "2.0.0" || got.String("digest") != e.digests["2.0.0"] {
		t.Fatalf("upgraded: %s", got.Body)
	}

	bad3 := do("upgrade3", "POST", "/app-instances/"+id+"/upgrade", map[string]string{"target_version": "3.0.0"})
	if op := waitOp(t, e.bot, e.pid, bad3.String("operation_id")); op.String("state") != "failed" || op.String("reason_code") != "container_exited" {
		t.Fatalf("failed upgrade op: %s", op.Body)
	}
	got = e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	if got.String("status") != "running" || got.String("version") != "2.0.0" || got.String("reason_code") != "upgrade_reverted" {
		t.Fatalf("reverted: %s", got.Body)
	}
	if logs := e.bot.Do("GET", e.path("/app-instances/"+id+"/logs"), nil).Want(t, 200); !strings.Contains(string(logs.Body), "boom") {
		t.Fatalf("logs: %s", logs.Body)
	}

	rb := do("rollback", "POST", "/app-instances/"+id+"/rollback", map[string]string{"target_version": "1.0.0"})
	waitOp(t, e.bot, e.pid, rb.String("operation_id"))
	if got := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); got.String("version") != "1.0.0" || got.String("digest") != e.digests["1.0.0"] {
		t.Fatalf("rolled back: %s", got.Body)
	}

	// Version 1.0.0 is in use: it cannot be retired (deprecate first).
	e.admin.Do("POST", "/api/v1/admin/apps/catalog/echo/versions/1.0.0/deprecate", map[string]string{"reason": "t"}).Want(t, 200)
	e.admin.Do("POST", "/api/v1/admin/apps/catalog/echo/versions/1.0.0/retire", map[string]string{"reason": "t"}).Want(t, 409)

	dec := do("decommission", "POST", "/app-instances/"+id+"/decommission", nil)
	if op := waitOp(t, e.bot, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("decommission op: %s", op.Body)
	}
	got = e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	if got.String("status") != "decommissioned" {
		t.Fatalf("decommissioned: %s", got.Body)
	}
	// Idempotent: the same operation again.
	if again := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202); again.String("operation_id") != dec.String("operation_id") {
		t.Fatalf("repeat decommission: %s", again.Body)
	}
	// The instance's own identity is gone.
	e.admin.Do("GET", e.path("/service-accounts/"+got.String("service_account_id")), nil).Want(t, 404)
	e.admin.Do("POST", "/api/v1/admin/apps/catalog/echo/versions/1.0.0/retire", map[string]string{"reason": "t"}).Want(t, 200)

	want := []string{"apps.instance.requested", "apps.instance.deploying", "apps.instance.running",
		"apps.instance.upgrade_requested", "apps.instance.upgraded",
		"apps.instance.upgrade_requested", "apps.instance.rolled_back",
		"apps.instance.rollback_requested", "apps.instance.rolled_back",
		"apps.instance.decommission_requested", "apps.instance.decommissioned"}
	timeline := e.bot.Do("GET", e.path("/app-instances/"+id+"/events?limit=100"), nil).Want(t, 200).Items()
	var types []string
	for _, it := range timeline {
		types = append(types, it["event_type"].(string))
	}
	if !slices.Equal(types, want) {
		t.Fatalf("timeline:\n got %v\nwant %v", types, want)
	}
	// The event stream: same types in order, each request's events under
	// its own correlation id.
	api := client.New(e.s.URL, e.bot.Token)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var streamed []client.Event
	err := api.FollowEvents(ctx, client.ProjectEventsPath(e.pid), client.EventFilter{Subject: "app-instances/" + id}, "", func(ev client.Event) error {
		streamed = append(streamed, ev)
		if len(streamed) == len(want) {
			return errDone
		}
		return nil
	})
	if err != errDone {
		t.Fatalf("stream: %v (got %d events)", err, len(streamed))
	}
	byReq := map[string][]int{"create": {0, 1, 2}, "upgrade": {3, 4}, "upgrade3": {5, 6}, "rollback": {7, 8}, "decommission": {9, 10}}
	for req, idx := range byReq {
		for _, i := range idx {
			ev := streamed[i]
			var data map[string]any
			_ = json.Unmarshal(ev.Data, &data)
			if ev.Type != want[i] || ev.CorrelationID != corr[req] || data["correlation_id"] != corr[req] || data["app_instance_id"] != id ||
				data["operating_mode"] != "tenant_dedicated" || data["runtime_backend"] != "launchable_oci" || data["org_id"] == "" {
				t.Fatalf("event %d (%s): type %s correlation %s (want %s) data %s", i, req, ev.Type, ev.CorrelationID, corr[req], ev.Data)
			}
		}
	}
}

var errDone = fmt.Errorf("done")

// Every refusal of create answers 400 with its field error.
func TestInstanceCreateRefusals(t *testing.T) {
	t.Parallel()
	e := newInstanceEnv(t, store.SQLite, "echo", map[string]v1.Image{"1.0.0": nil, "2.0.0": nil}, echoManifest("echo"), 1)
	// Another project and its allocation.
	other := e.admin.Do("POST", "/api/v1/orgs/"+e.s.Creds.OrgID+"/projects", map[string]string{"slug": "other", "name": "Other"}).Want(t, 201).String("id")
	node2 := joinSimNode(t, e.s, e.admin, "node-b", 1)
	foreign := e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": other, "gpu_count": 1, "sku": "test.1x", "node_id": node2.id}).Want(t, 201).String("id")
	base := func() map[string]any {
		return map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "x"}
	}
	with := func(k string, v any) map[string]any {
		m := base()
		m[k] = v
		return m
	}
	check := func(name string, body map[string]any, field, code string) {
		t.Helper()
		r := e.bot.Do("POST", e.path("/app-instances"), body).Want(t, 400)
		fields, _ := r.JSON["error"].(map[string]any)["details"].(map[string]any)["fields"].([]any)
		if len(fields) == 0 {
			t.Fatalf("%s: no field errors: %s", name, r.Body)
		}
		f := fields[0].(map[string]any)
		if f["field"] != field || f["code"] != code {
			t.Fatalf("%s: got %v %v, want %s %s: %s", name, f["field"], f["code"], field, code, r.Body)
		}
		// Launch preview of the same values never passes what create
		// refused: it refuses too, or its launch_refusal is create's answer.
		slug, _ := body["app_slug"].(string)
		if slug == "" || body["target_allocation_id"] != nil {
			return
		}
		req := map[string]any{}
		for _, k := range []string{"operating_mode", "control_plane_scope", "resources", "config", "placement_intent", "parameters"} {
			if v, ok := body[k]; ok {
				req[k] = v
			}
		}
		pv := e.bot.Do("POST", e.path("/apps/catalog/"+slug+"/versions/"+body["version"].(string)+"/launch-preview"), req)
		if pv.Status != 200 {
			if pv.Status < 400 || pv.Status >= 500 {
				t.Fatalf("%s: preview answered %d: %s", name, pv.Status, pv.Body)
			}
			return
		}
		ref, _ := pv.JSON["launch_refusal"].(map[string]any)
		pf, _ := ref["details"].(map[string]any)["fields"].([]any)
		if ref["status"] != float64(400) || ref["code"] != "validation_failed" || len(pf) == 0 || pf[0].(map[string]any)["field"] != field || pf[0].(map[string]any)["code"] != code {
			t.Fatalf("%s: create refused, preview answered %s", name, pv.Body)
		}
	}
	// Launch preview names the project's allocations and which fit.
	pv := e.bot.Do("POST", e.path("/apps/catalog/echo/versions/1.0.0/launch-preview"), map[string]any{"resources": map[string]any{"gpu_count": 1}}).Want(t, 200)
	targets, _ := pv.JSON["target_allocations"].([]any)
	if len(targets) != 1 || targets[0].(map[string]any)["allocation_id"] != e.alloc || targets[0].(map[string]any)["compatible"] != true || pv.JSON["launch_refusal"] != nil {
		t.Fatalf("preview targets: %s", pv.Body)
	}
	check("no slug", with("app_slug", ""), "/app_slug", "required")
	check("unknown app", with("app_slug", "nope"), "/app_slug", "not_found")
	check("unknown version", with("version", "9.9.9"), "/version", "not_found")
	check("foreign allocation", with("target_allocation_id", foreign), "/target_allocation_id", "not_found")
	check("unknown allocation", with("target_allocation_id", uuid.NewString()), "/target_allocation_id", "not_found")
	check("gpu bound", with("resources", map[string]any{"gpu_count": 3}), "/resources/gpu_count", "out_of_range")
	check("gpus do not fit", with("resources", map[string]any{"gpu_count": 2}), "/target_allocation_id", "no_compatible_allocation")
	check("mode", with("operating_mode", "platform_managed"), "/operating_mode", "not_supported")
	check("pip", with("parameters", map[string]any{"pip_packages": []string{"numpy==2.1.0", "not a package!!"}}), "/parameters/pip_packages/1", "invalid_requirement")
	// Inactive allocation.
	e.admin.Do("POST", "/api/v1/admin/allocations/"+e.alloc+"/release", nil).Want(t, 200)
	check("released allocation", with("target_allocation_id", e.alloc), "/target_allocation_id", "allocation_not_active")
	e.alloc = e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 1, "sku": "test.1x", "node_id": e.node.id}).Want(t, 201).String("id")
	// Deprecated: existing instances only; not entitled; revoked.
	e.admin.Do("POST", "/api/v1/admin/apps/catalog/echo/versions/2.0.0/deprecate", map[string]string{"reason": "t"}).Want(t, 200)
	check("deprecated", with("version", "2.0.0"), "/version", "version_not_launchable")
	arts := e.bot.Do("GET", e.path("/app-artifacts?app_version=1.0.0"), nil).Want(t, 200).Items()
	e.admin.Do("POST", e.path("/app-artifacts/"+arts[0]["id"].(string)+"/revoke"), map[string]string{"reason": "key leak"}).Want(t, 200)
	check("revoked", base(), "/version", "artifact_revoked")
	e.admin.Do("PUT", e.path("/apps/entitlements/echo"), map[string]any{"enabled": false}).Want(t, 200)
	check("not entitled", base(), "/app_slug", "not_entitled")
	// Nothing was created by any of it.
	if items := e.bot.Do("GET", e.path("/app-instances"), nil).Want(t, 200).Items(); len(items) != 0 {
		t.Fatalf("refused launches left instances: %v", items)
	}
	// A service account of another project sees none of this project's instances.
	e.bot.Do("GET", "/api/v1/projects/"+other+"/app-instances", nil).Want(t, 404)
}

// waitStatus polls an instance until it is in status.
func waitStatus(t *testing.T, e *instanceEnv, id, status string) *servertest.Response {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		r := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
		if r.String("status") == status {
			return r
		}
		time.Sleep(50 * time.Millisecond) // polling an async API, as a client would
	}
	t.Fatalf("instance %s never became %s", id, status)
	return nil
}

// nodeLossTimeline is an instance's timeline through two node losses: the
// first return finds the workload still running, the second redeploys it.
var nodeLossTimeline = []string{"apps.instance.requested", "apps.instance.deploying", "apps.instance.running",
	"apps.instance.failed", "apps.instance.running",
	"apps.instance.failed", "apps.instance.deploying", "apps.instance.running"}

// A node whose agent dies: its running instance fails with node_lost
// within the liveness window (TTL + grace). When the agent comes back and
// reports the workload still running, the instance is running again at
// once; when it reports nothing, the instance is redeployed.
//
// Serial (no t.Parallel): it bounds how late node_lost comes (10 s) and
// the simulated node must beat within a 2 s TTL; other tests' load
// stretches both.
func TestInstanceNodeLoss(t *testing.T) {
	e := newInstanceEnv(t, store.SQLite, "echo", map[string]v1.Image{"1.0.0": nil}, echoManifest("echo"), 1, func(c *config.Config) {
		c.NodeHeartbeatTTL, c.NodeHeartbeatGrace = 2*time.Second, time.Second
	})
	e.node.serve(t, okResult)
	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "lossy"}).Want(t, 202)
	id := cr.String("id")
	waitOp(t, e.bot, e.pid, cr.String("operation_id"))
	var workload string
	for _, task := range e.node.tasks() {
		if task.Kind == nodeapi.KindContainerRun {
			var run nodeapi.ContainerRun
			_ = json.Unmarshal(task.Payload, &run)
			workload = run.Name
		}
	}

	// The agent dies; the workload (a container) survives it.
	lostAt := time.Now()
	e.node.pause()
	got := waitStatus(t, e, id, "failed")
	if got.String("reason_code") != "node_lost" || time.Since(lostAt) > 10*time.Second {
		t.Fatalf("node loss: %s after %s", got.Body, time.Since(lostAt))
	}
	memberStatus := func() string { // the current workload's member
		var st []string
		for _, m := range e.bot.Do("GET", e.path("/app-instances/"+id+"/members"), nil).Want(t, 200).Items() {
			if m["workload_name"] == workload {
				st = append(st, m["status"].(string))
			}
		}
		return strings.Join(st, ",")
	}
	if got := memberStatus(); got != "failed" {
		t.Fatalf("the member on the lost node is %q, want failed", got)
	}
	e.node.resume([]nodeapi.Workload{{InstanceID: id, ContainerID: "c1", Name: "/" + workload, State: "running"}})
	got = waitStatus(t, e, id, "running")
	if got.String("reason_code") != "" {
		t.Fatalf("reconciled: %s", got.Body)
	}
	if got := memberStatus(); got != "running" {
		t.Fatalf("the member that outlived the node's silence is %q, want running", got)
	}

	// Again, and this time nothing survived: a redeploy.
	runsBefore := 0
	for _, task := range e.node.tasks() {
		if task.Kind == nodeapi.KindContainerRun {
			runsBefore++
		}
	}
	e.node.pause()
	waitStatus(t, e, id, "failed")
	e.node.resume(nil)
	waitStatus(t, e, id, "running")
	runs := 0
	for _, task := range e.node.tasks() {
		if task.Kind == nodeapi.KindContainerRun {
			runs++
		}
	}
	if runs != runsBefore+1 {
		t.Fatalf("redeploys: %d run tasks, want %d", runs, runsBefore+1)
	}
	if got := timeline(t, e, id); !slices.Equal(got, nodeLossTimeline) {
		t.Fatalf("timeline:\n got %v\nwant %v", got, nodeLossTimeline)
	}
}

// Releasing an allocation tears down what runs on it first: the allocation
// is `releasing` (its GPUs still held, nothing else can be placed on them)
// while its instances are decommissioned on the node, and `released` — its
// GPUs back — only once the node verified the teardown. The events say so
// in order.
func TestAllocationReleaseTearsDownInstances(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		e := newInstanceEnv(t, d, "echo", map[string]v1.Image{"1.0.0": nil}, echoManifest("echo"), 1)
		gate := make(chan struct{})
		e.node.serve(t, func(task nodeapi.Task) nodeapi.TaskResult {
			if task.Kind == nodeapi.KindTeardownVerify {
				<-gate // the node is slow to tear down
			}
			return okResult(task)
		})
		cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "released"}).Want(t, 202)
		id := cr.String("id")
		waitOp(t, e.bot, e.pid, cr.String("operation_id"))

		rel := e.admin.Do("POST", "/api/v1/admin/allocations/"+e.alloc+"/release", nil).Want(t, 200)
		if rel.String("state") != "releasing" {
			t.Fatalf("release of an allocation with a running instance: %s", rel.Body)
		}
		if got := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); got.String("status") != "decommissioning" || got.String("reason_code") != "allocation_released" {
			t.Fatalf("instance on a releasing allocation: %s", got.Body)
		}
		// Its GPU is still held: nothing else can be placed on the node.
		if r := e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 1, "sku": "test.1x", "node_id": e.node.id}).Want(t, 409); r.ErrorCode() != "insufficient_capacity" {
			t.Fatalf("placement on a releasing allocation's GPU: %s", r.Body)
		}
		// Asking again changes nothing.
		if again := e.admin.Do("POST", "/api/v1/admin/allocations/"+e.alloc+"/release", nil).Want(t, 200); again.String("state") != "releasing" {
			t.Fatalf("second release: %s", again.Body)
		}
		close(gate)
		waitStatus(t, e, id, "decommissioned")
		if got := e.bot.Do("GET", "/api/v1/projects/"+e.pid+"/allocations/"+e.alloc, nil).Want(t, 200); got.String("state") != "released" || got.String("released_at") == "" {
			t.Fatalf("after teardown: %s", got.Body)
		}
		e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 1, "sku": "test.1x", "node_id": e.node.id}).Want(t, 201)
		var types []string
		for deadline := time.Now().Add(20 * time.Second); len(types) < 4 && time.Now().Before(deadline); {
			types = nil
			for _, ev := range e.admin.Do("GET", "/api/v1/projects/"+e.pid+"/events?limit=200&type=nodes.allocation.", nil).Want(t, 200).Items() {
				if ev["subject"] == "allocations/"+e.alloc {
					types = append(types, ev["type"].(string))
				}
			}
			time.Sleep(50 * time.Millisecond) // events are listed once the relay sequenced them
		}
		if want := []string{"nodes.allocation.pending", "nodes.allocation.active", "nodes.allocation.releasing", "nodes.allocation.released"}; !slices.Equal(types, want) {
			t.Fatalf("allocation events %v, want %v", types, want)
		}
	})
}
