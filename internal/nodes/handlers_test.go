package nodes_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
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
