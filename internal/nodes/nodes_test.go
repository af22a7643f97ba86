package nodes_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A join token works once; the node it makes can exchange assertions for
// tokens (each assertion once) and beats into ready.
func TestJoinTokenSingleUseAndNodeToken(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		admin := s.Admin()
		a := join(t, s, admin, "gpu-1", 1)
		// Second use of the same join token fails.
		_, pub := newKey(t)
		r := s.Anonymous().Do("POST", "/api/v1/nodes/join", nodeapi.JoinRequest{JoinToken: a.joinTok, Name: "again", PublicKeyPEM: pub,
			Inventory: inventory("again", 0, "")}).Want(t, 401)
		if r.ErrorCode() != "invalid_join_token" {
			t.Fatalf("code %s", r.ErrorCode())
		}
		// A replayed assertion is refused.
		as := a.assertion(t, "same-jti")
		s.Anonymous().Do("POST", "/api/v1/nodes/token", nodeapi.TokenRequest{Assertion: as}).Want(t, 200)
		s.Anonymous().Do("POST", "/api/v1/nodes/token", nodeapi.TokenRequest{Assertion: as}).Want(t, 400)
		n := admin.Do("GET", "/api/v1/admin/nodes/"+a.id, nil).Want(t, 200)
		if n.String("state") != "ready" {
			t.Fatalf("state %s", n.String("state"))
		}
		if g := n.JSON["gpus"].([]any); len(g) != 1 {
			t.Fatalf("gpus %v", g)
		}
		// The server answers with the digest of what it holds; a changed
		// inventory replaces it (and the GPUs placement sees).
		inv := inventory("gpu-1", 1, "NVIDIA H100 80GB HBM3")
		_, want, _ := inv.Canonical()
		if got := a.beat(t, nil).String("inventory_digest"); got != want {
			t.Fatalf("digest %s, want %s", got, want)
		}
		inv = inventory("gpu-1", 2, "NVIDIA H100 80GB HBM3")
		_, want, _ = inv.Canonical()
		if got := a.beat(t, &inv).String("inventory_digest"); got != want {
			t.Fatalf("digest after change %s, want %s", got, want)
		}
		if n := admin.Do("GET", "/api/v1/admin/nodes/"+a.id, nil).Want(t, 200); n.JSON["free_gpus"] != float64(2) {
			t.Fatalf("after inventory change: %s", n.Body)
		}
		// A plain user cannot create join tokens or read nodes.
		_, u := s.NewUser(admin, "someone@example.com")
		u.Do("POST", "/api/v1/admin/nodes/join-tokens", map[string]any{}).Want(t, 403)
		u.Do("GET", "/api/v1/admin/nodes", nil).Want(t, 403)
	})
}

// A node sees only its own tasks: another node's token cannot poll,
// heartbeat for or report results of a node that is not itself.
func TestTaskQueueAndNodeIsolation(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		admin := s.Admin()
		a := join(t, s, admin, "gpu-a", 0)
		b := join(t, s, admin, "gpu-b", 0)
		ctx := context.Background()
		task, err := s.App.Nodes.EnqueueTask(ctx, nil, a.id, nodeapi.KindWorkloadInspect, map[string]any{"instance_id": "x"}, "", s.Creds.ProjectID)
		if err != nil {
			t.Fatal(err)
		}
		// b polling a's queue: not found, and a's task stays queued.
		b.c.Do("GET", "/api/v1/nodes/"+a.id+"/tasks", nil).Want(t, 404)
		b.c.Do("POST", "/api/v1/nodes/"+a.id+"/tasks/"+task.ID+"/result", nodeapi.TaskResult{State: "succeeded"}).Want(t, 404)
		b.c.Do("POST", "/api/v1/nodes/"+b.id+"/tasks/"+task.ID+"/result", nodeapi.TaskResult{State: "succeeded"}).Want(t, 404)
		b.c.Do("POST", "/api/v1/nodes/"+a.id+"/heartbeat", nodeapi.Heartbeat{}).Want(t, 404)
		if got := b.c.Do("GET", "/api/v1/nodes/"+b.id+"/tasks", nil).Want(t, 200); len(got.JSON["tasks"].([]any)) != 0 {
			t.Fatalf("b sees tasks: %s", got.Body)
		}
		// Admin tokens are not node tokens either.
		admin.Do("GET", "/api/v1/nodes/"+a.id+"/tasks", nil).Want(t, 404)
		// a gets its task, leased; a second poll gets nothing.
		got := a.c.Do("GET", "/api/v1/nodes/"+a.id+"/tasks?wait_seconds=1", nil).Want(t, 200)
		var tl nodeapi.TaskList
		if err := json.Unmarshal(got.Body, &tl); err != nil || len(tl.Tasks) != 1 || tl.Tasks[0].ID != task.ID || tl.Tasks[0].Attempt != 1 {
			t.Fatalf("poll: %s (%v)", got.Body, err)
		}
		if got := a.c.Do("GET", "/api/v1/nodes/"+a.id+"/tasks", nil).Want(t, 200); len(got.JSON["tasks"].([]any)) != 0 {
			t.Fatalf("leased task delivered twice: %s", got.Body)
		}
		a.c.Do("POST", "/api/v1/nodes/"+a.id+"/tasks/"+task.ID+"/result", nodeapi.TaskResult{State: "failed"}).Want(t, 400)
		a.c.Do("POST", "/api/v1/nodes/"+a.id+"/tasks/"+task.ID+"/result", nodeapi.TaskResult{State: "failed", ReasonCode: nodeapi.ReasonNotFound}).Want(t, 204)
		// Idempotent by task id.
		a.c.Do("POST", "/api/v1/nodes/"+a.id+"/tasks/"+task.ID+"/result", nodeapi.TaskResult{State: "succeeded"}).Want(t, 204)
		done, err := s.App.Nodes.Task(ctx, task.ID)
		if err != nil || done.State != "failed" || done.ReasonCode != nodeapi.ReasonNotFound {
			t.Fatalf("task %+v %v", done.NodeTask, err)
		}
		// Removing b cuts its token off at once.
		admin.Do("POST", "/api/v1/admin/nodes/"+b.id+"/remove", nil).Want(t, 200)
		b.c.Do("GET", "/api/v1/nodes/"+b.id+"/tasks", nil).Want(t, http.StatusUnauthorized)
	})
}

// Allocations: placement holds specific GPUs, project members read them,
// release returns the GPUs; a 0-GPU node hosts CPU-only slices.
func TestAllocationLifecycle(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		admin := s.Admin()
		n := join(t, s, admin, "gpu-8", 2)
		cpu := join(t, s, admin, "cpu", 0)
		p := s.Creds.ProjectID
		a1 := admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": p, "sku": "h100-80gb.1x"}).Want(t, 201)
		if a1.String("node_id") != n.id || len(a1.JSON["gpu_uuids"].([]any)) != 1 || a1.String("state") != "pending" {
			t.Fatalf("alloc %s", a1.Body)
		}
		// Pending until its node beats again: the node confirmed it.
		get := func(id string) string {
			return admin.Do("GET", "/api/v1/projects/"+p+"/allocations/"+id, nil).Want(t, 200).String("state")
		}
		cpu.beat(t, nil) // another node's beat confirms nothing here
		if got := get(a1.String("id")); got != "pending" {
			t.Fatalf("after another node's beat: %s", got)
		}
		n.beat(t, nil)
		if got := get(a1.String("id")); got != "active" {
			t.Fatalf("after its node's beat: %s", got)
		}
		n.beat(t, nil) // nothing left to confirm: a plain beat
		admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": p, "sku": "h100-80gb.2x"}).Want(t, 409)
		bm := admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": p, "sku": "cpu.bm", "shape": "baremetal", "node_id": cpu.id}).Want(t, 201)
		admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": p, "sku": "cpu.0x", "node_id": cpu.id}).Want(t, 409)
		admin.Do("POST", "/api/v1/admin/allocations/"+bm.String("id")+"/release", nil).Want(t, 200)
		admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": p, "sku": "cpu.0x", "node_id": cpu.id}).Want(t, 201)
		list := admin.Do("GET", "/api/v1/projects/"+p+"/allocations", nil).Want(t, 200)
		if len(list.Items()) != 3 {
			t.Fatalf("list %s", list.Body)
		}
		admin.Do("GET", "/api/v1/projects/"+p+"/allocations/"+a1.String("id"), nil).Want(t, 200)
		rel := admin.Do("POST", "/api/v1/admin/allocations/"+a1.String("id")+"/release", nil).Want(t, 200)
		if rel.String("state") != "released" {
			t.Fatalf("release %s", rel.Body)
		}
		admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": p, "sku": "h100-80gb.2x"}).Want(t, 201)
		ivs, err := s.DB.Queries().AllocationIntervals(context.Background(), p, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		closed := 0
		for _, iv := range ivs {
			if !iv.EndedAt.IsZero() {
				closed++
			}
		}
		if len(ivs) != 4 || closed != 2 {
			t.Fatalf("intervals %+v", ivs)
		}
	})
}

// Delivery is at least once: a leased task whose lease ran out is delivered
// again with the next attempt number, until a result arrives. A long poll
// returns a task queued while it waits.
func TestTaskLeaseExpiryRedelivers(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		a := join(t, s, s.Admin(), "lease", 0)
		now := time.Now()
		svc := nodes.New(nodes.Deps{Store: store.Nodes(s.DB), IAM: s.App.IAM, Now: func() time.Time { return now }, TaskLease: time.Minute})
		ctx := principal.With(context.Background(), principal.Principal{Type: principal.Node, ID: a.id})
		task, err := svc.EnqueueTask(ctx, nil, a.id, nodeapi.KindContainerStop, nodeapi.ContainerRef{InstanceID: "i1"}, "i1", s.Creds.ProjectID)
		if err != nil {
			t.Fatal(err)
		}
		poll := func() []nodeapi.Task {
			ts, err := svc.PollTasks(ctx, a.id, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			return ts
		}
		if ts := poll(); len(ts) != 1 || ts[0].Attempt != 1 {
			t.Fatalf("first delivery %+v", ts)
		}
		if ts := poll(); len(ts) != 0 {
			t.Fatalf("delivered within its lease: %+v", ts)
		}
		now = now.Add(2 * time.Minute)
		ts := poll()
		if len(ts) != 1 || ts[0].ID != task.ID || ts[0].Attempt != 2 {
			t.Fatalf("redelivery %+v", ts)
		}
		if err := svc.ReportResult(ctx, a.id, task.ID, nodeapi.TaskResult{State: nodeapi.ResultSucceeded}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Hour)
		if ts := poll(); len(ts) != 0 {
			t.Fatalf("completed task delivered: %+v", ts)
		}
		// A long poll gets a task queued while it waits.
		got := make(chan []nodeapi.Task, 1)
		go func() {
			ts, _ := s.App.Nodes.PollTasks(ctx, a.id, 30*time.Second, 0)
			got <- ts
		}()
		if _, err := s.App.Nodes.EnqueueTask(ctx, nil, a.id, nodeapi.KindWorkloadInspect, map[string]any{}, "", ""); err != nil {
			t.Fatal(err)
		}
		if ts := <-got; len(ts) != 1 || ts[0].Kind != nodeapi.KindWorkloadInspect {
			t.Fatalf("long poll got %+v", ts)
		}
	})
}

// A workload's log may hold NUL bytes; its failed result is stored with
// them shown as U+FFFD (PostgreSQL's JSONB refuses \u0000, and the result
// failed at every delivery), and an output holding one is refused with a
// 400, not a 500.
func TestTaskResultWithNULIsStored(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		a := join(t, s, s.Admin(), "nul", 0)
		ctx := context.Background()
		task, err := s.App.Nodes.EnqueueTask(ctx, nil, a.id, nodeapi.KindWorkloadInspect, map[string]any{"instance_id": "x"}, "", s.Creds.ProjectID)
		if err != nil {
			t.Fatal(err)
		}
		a.c.Do("GET", "/api/v1/nodes/"+a.id+"/tasks?wait_seconds=1", nil).Want(t, 200)
		path := "/api/v1/nodes/" + a.id + "/tasks/" + task.ID + "/result"
		a.c.Do("POST", path, nodeapi.TaskResult{State: "succeeded", Output: json.RawMessage(`{"name":"a\u0000b"}`)}).Want(t, 400)
		a.c.Do("POST", path, nodeapi.TaskResult{State: "failed", ReasonCode: nodeapi.ReasonContainerExited, Message: "exit\x00 1",
			LogTail: []string{"ok", "bin\x00ary"}}).Want(t, 204)
		done, err := s.App.Nodes.Task(ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		var r nodeapi.TaskResult
		if err := json.Unmarshal(done.Result, &r); err != nil {
			t.Fatal(err)
		}
		if r.Message != "exit\uFFFD 1" || len(r.LogTail) != 2 || r.LogTail[1] != "bin\uFFFDary" {
			t.Fatalf("stored result %q %q", r.Message, r.LogTail)
		}
	})
}
