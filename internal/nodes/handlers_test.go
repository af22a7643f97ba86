package nodes_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// Tasks queued inside a caller's transaction exist only if it commits; a
// result handler sees each task's first result once, inside the recording
// transaction, and the result carries its reason code.
func TestEnqueueInCallersTransactionAndResultHandlers(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	a := join(t, s, s.Admin(), "h", 0)
	ctx := principal.With(context.Background(), principal.SystemActor)
	var (
		mu   sync.Mutex
		seen []nodeapi.TaskResult
	)
	s.App.Nodes.OnTaskResult(nodeapi.KindContainerRun, func(_ context.Context, tx storage.Tx, task nodes.Task, r nodeapi.TaskResult) error {
		mu.Lock()
		defer mu.Unlock()
		if task.InstanceID != "inst-1" || len(task.PayloadJSON) == 0 {
			t.Errorf("handler got %+v", task.NodeTask)
		}
		seen = append(seen, r)
		return nil
	})
	boom := errors.New("caller fails")
	err := s.DB.Mutate(ctx, func(tx *store.Tx) error {
		if _, err := s.App.Nodes.EnqueueTask(ctx, tx, a.id, nodeapi.KindContainerRun, nodeapi.ContainerRun{Name: "x"}, "inst-0", s.Creds.ProjectID); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	var id string
	err = s.DB.Mutate(ctx, func(tx *store.Tx) error {
		task, err := s.App.Nodes.EnqueueTask(ctx, tx, a.id, nodeapi.KindContainerRun, nodeapi.ContainerRun{Name: "x", Env: map[string]string{"K": "secret-value"}}, "inst-1", s.Creds.ProjectID)
		id = task.ID
		if err != nil {
			return err
		}
		return tx.Audit(store.AuditEvent{Action: "test.enqueue", ResourceType: "test"}, nil, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	// Payloads are sealed at rest.
	if raw, err := s.DB.Queries().GetNodeTask(ctx, id); err != nil || strings.Contains(raw.Payload, "secret-value") {
		t.Fatalf("payload at rest: %v %q", err, raw.Payload)
	}
	if _, err := s.App.Nodes.EnqueueTask(ctx, nil, a.id, "shell.exec", map[string]any{}, "", ""); err == nil {
		t.Fatal("an unknown task kind was queued")
	}
	got := a.c.Do("GET", "/api/v1/nodes/"+a.id+"/tasks", nil).Want(t, 200)
	tasks := got.JSON["tasks"].([]any)
	if len(tasks) != 1 || tasks[0].(map[string]any)["id"] != id {
		t.Fatalf("delivered %s", got.Body)
	}
	for range 2 {
		a.c.Do("POST", "/api/v1/nodes/"+a.id+"/tasks/"+id+"/result", nodeapi.TaskResult{State: "failed", ReasonCode: nodeapi.ReasonImagePullFailed, Message: "pull refused"}).Want(t, 204)
	}
	if len(seen) != 1 || seen[0].ReasonCode != nodeapi.ReasonImagePullFailed {
		t.Fatalf("handler saw %+v", seen)
	}
	if evs := eventTypes(t, s.DB); evs[nodes.EventTaskCompleted] != 1 {
		t.Fatalf("events %v", evs)
	}
}

// Two reports of one task that race (an agent re-sending a report whose
// answer it lost) are both answered as the idempotent repeat they are: on
// PostgreSQL the second one's update waits for the first one's commit and
// then matches nothing, which is no missing task. The handlers see the
// first report only.
func TestConcurrentRepeatedResultIsIdempotent(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		a := join(t, s, s.Admin(), "h", 0)
		ctx := principal.With(context.Background(), principal.SystemActor)
		task, err := s.App.Nodes.EnqueueTask(ctx, nil, a.id, nodeapi.KindContainerRun, nodeapi.ContainerRun{Name: "x"}, "inst-1", s.Creds.ProjectID)
		if err != nil {
			t.Fatal(err)
		}
		entered, release := make(chan struct{}), make(chan struct{})
		var handled atomic.Int32
		s.App.Nodes.OnTaskResult(nodeapi.KindContainerRun, func(context.Context, storage.Tx, nodes.Task, nodeapi.TaskResult) error {
			if handled.Add(1) == 1 {
				close(entered)
				<-release // hold the first report's transaction open
			}
			return nil
		})
		path := "/api/v1/nodes/" + a.id + "/tasks/" + task.ID + "/result"
		report := func() *servertest.Response {
			return a.c.Do("POST", path, nodeapi.TaskResult{State: nodeapi.ResultSucceeded})
		}
		first := make(chan *servertest.Response, 1)
		go func() { first <- report() }()
		<-entered
		second := make(chan *servertest.Response, 1)
		go func() { second <- report() }()
		if d == store.Postgres {
			waitForBlockedCompletion(t, s.App.Config.DatabaseURL, second)
		}
		close(release)
		for _, r := range []*servertest.Response{<-first, <-second} {
			if r.Status != 204 {
				t.Fatalf("a repeated report got %d: %s", r.Status, r.Body)
			}
		}
		if n := handled.Load(); n != 1 {
			t.Fatalf("handlers ran %d times", n)
		}
		if evs := eventTypes(t, s.DB); evs[nodes.EventTaskCompleted] != 1 {
			t.Fatalf("events %v", evs)
		}
	})
}

// waitForBlockedCompletion returns once a session waits on a lock in the
// update that completes a task (the second report, behind the first), or
// once that report has been answered without waiting.
func waitForBlockedCompletion(t *testing.T, dbURL string, answered chan *servertest.Response) {
	t.Helper()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE 'UPDATE node_tasks SET state = %'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case r := <-answered:
			answered <- r
			return
		case <-ctx.Done():
			t.Fatal("the second report never reached the task row")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
