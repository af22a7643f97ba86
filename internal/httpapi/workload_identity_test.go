package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// An app instance's own identity (the key the node mounts into it) reads
// its own instance and reports its own usage, and nothing else: not the
// project's members, other instances or their logs, the project's events,
// the ledger, the catalog or artifacts, and no pull credentials. Every
// route is swept with the project's real ids and the other instance's id.
func TestInstanceIdentityIsLeastPrivilege(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		testInstanceIdentityIsLeastPrivilege(t, d)
	})
}

func testInstanceIdentityIsLeastPrivilege(t *testing.T, d store.Dialect) {
	e := newInstanceEnv(t, d, "echo", map[string]v1.Image{"1.0.0": nil}, echoManifest("echo"), 2)
	e.node.serve(t, okResult)
	create := func(name string) string {
		cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": name}).Want(t, 202)
		if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("create %s: %s", name, op.Body)
		}
		return cr.String("id")
	}
	mine, other := create("mine"), create("other")
	identity := workloadClient(t, e, mine)

	identity.Do("GET", e.path("/app-instances/"+mine), nil).Want(t, 200)
	if r := identity.Do("GET", e.path("/app-instances/"+other), nil); r.Status != 404 {
		t.Fatalf("another instance of the project: %d %s", r.Status, r.Body)
	}
	// Its own members it reads (a cluster app's controller follows its
	// workers so); another instance's it does not see.
	if ms := identity.Do("GET", e.path("/app-instances/"+mine+"/members"), nil).Want(t, 200).Items(); len(ms) != 1 || ms[0]["added"] != false {
		t.Fatalf("own members: %v", ms)
	}
	if r := identity.Do("GET", e.path("/app-instances/"+other+"/members"), nil); r.Status != 404 {
		t.Fatalf("another instance's members: %d %s", r.Status, r.Body)
	}
	ev := map[string]any{"specversion": "1.0", "id": "u1", "source": "echo", "type": "gpuaas.usage.v1",
		"time": time.Now().UTC().Format(time.RFC3339Nano), "data": map[string]any{"usage_unit": "requests", "quantity": 1}}
	if r := identity.Do("POST", e.path("/app-instances/"+mine+"/usage"), ev, "Content-Type", "application/cloudevents+json"); r.Status == 401 || r.Status == 403 {
		t.Fatalf("own usage refused: %d %s", r.Status, r.Body)
	}
	if r := identity.Do("POST", e.path("/app-instances/"+other+"/usage"), ev, "Content-Type", "application/cloudevents+json"); r.Status < 400 {
		t.Fatalf("usage for another instance: %d %s", r.Status, r.Body)
	}

	arts := e.admin.Do("GET", e.path("/app-artifacts"), nil).Want(t, 200).Items()
	ids := map[string]string{"org_id": e.s.Creds.OrgID, "project_id": e.pid, "app_instance_id": other,
		"artifact_id": arts[0]["id"].(string), "app_slug": "echo", "version": "1.0.0"}
	// Who it is, and where the platform's registry is (no tenant data).
	allowed := map[string]bool{"GET /api/v1/me": true, "GET /api/v1/apps/registry": true}
	for _, rt := range e.s.App.API.Routes() {
		if rt.Public || allowed[rt.Method+" "+rt.Path] || strings.HasPrefix(rt.Path, "/api/v1/nodes/") {
			continue
		}
		t.Run(rt.Method+" "+rt.Path, func(t *testing.T) {
			r := identity.Do(rt.Method, fill(rt.Path, ids), body(rt.Method, rt.Path, ""))
			if r.Status < 400 && !emptyList(r) {
				t.Fatalf("the instance identity got %d: %s", r.Status, r.Body)
			}
		})
	}
}

// emptyList is a 2xx list that shows nothing (a route any signed-in caller
// may call, filtered to what the caller may see).
func emptyList(r *servertest.Response) bool {
	var v struct {
		Items []json.RawMessage `json:"items"`
	}
	return r.Status == http.StatusOK && json.Unmarshal(r.Body, &v) == nil && v.Items != nil && len(v.Items) == 0
}

// workloadClient signs in with the identity key the platform mounted into
// instance id (read from its container.run task, as the workload reads the
// file) and returns a client acting as that identity.
func workloadClient(t testing.TB, e *instanceEnv, id string) *servertest.Client {
	t.Helper()
	return e.s.AsServiceAccount(workloadKey(t, e, id))
}

// workloadKey is the key file the instance's run task mounts.
func workloadKey(t testing.TB, e *instanceEnv, id string) client.KeyFile {
	t.Helper()
	for _, task := range e.node.tasks() {
		if task.Kind != nodeapi.KindContainerRun || task.InstanceID != id {
			continue
		}
		var run nodeapi.ContainerRun
		if err := json.Unmarshal(task.Payload, &run); err != nil || len(run.Mounts) == 0 {
			t.Fatalf("run task of %s: %v %s", id, err, task.Payload)
		}
		var key client.KeyFile
		if err := json.Unmarshal(run.Mounts[0].Content, &key); err != nil {
			t.Fatal(err)
		}
		return key
	}
	t.Fatalf("no run task for instance %s", id)
	return client.KeyFile{}
}

// An instance's own identity is the platform's: no one, a platform admin
// included, disables, re-keys or deletes it, or removes its role binding,
// through the API (each 409 managed_by_platform, nothing changed). A
// project admin could otherwise cut the instance off from reporting the
// usage billed to the project.
func TestInstanceIdentityIsThePlatforms(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		e := newInstanceEnv(t, d, "echo", map[string]v1.Image{"1.0.0": nil}, echoManifest("echo"), 1)
		e.node.serve(t, okResult)
		cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "own"}).Want(t, 202)
		if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("create: %s", op.Body)
		}
		key := workloadKey(t, e, cr.String("id"))
		sa := e.path("/service-accounts/" + key.ServiceAccountID)
		var binding string
		for _, b := range e.admin.Do("GET", e.path("/members?limit=500"), nil).Want(t, 200).Items() {
			if b["principal_id"] == key.ServiceAccountID {
				binding, _ = b["id"].(string)
			}
		}
		if binding == "" {
			t.Fatalf("no role binding of the instance's account %s among the project's members", key.ServiceAccountID)
		}
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{"POST", sa + "/disable", nil}, {"POST", sa + "/enable", nil},
			{"POST", sa + "/rotate-key", map[string]any{"grace_period_seconds": 0}},
			{"DELETE", sa, nil}, {"DELETE", e.path("/members/" + binding), nil},
		} {
			if r := e.admin.Do(c.method, c.path, c.body); r.Status != 409 || r.ErrorCode() != "managed_by_platform" {
				t.Errorf("%s %s: %d %s, want 409 managed_by_platform", c.method, c.path, r.Status, r.Body)
			}
		}
		if acc := e.admin.Do("GET", sa, nil).Want(t, 200); acc.String("status") != "active" || len(acc.JSON["keys"].([]any)) != 1 {
			t.Fatalf("the instance's account after the refusals: %s", acc.Body)
		}
		e.s.AsServiceAccount(key).Do("GET", e.path("/app-instances/"+cr.String("id")), nil).Want(t, 200)
	})
}
