package agent

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// gpuaas dev's seam with the real in-process agent: the dev node joins,
// gets the dev allocation, and executes a task; the same task delivered
// again is re-reported from the stored result, not executed twice.
func TestDevAgentRunsTasksOnce(t *testing.T) {
	agenttest.RequireDocker(t)
	s := servertest.Start(t, store.SQLite)
	dir := t.TempDir()
	var a *Agent
	start := func(ctx context.Context, apiURL, joinToken, dataDir string) (func(), error) {
		ag, err := New(Config{Server: apiURL, JoinToken: joinToken, DataDir: dir, Name: "dev-node", PollWait: 2})
		if err != nil {
			return nil, err
		}
		a = ag
		return ag.Stop, ag.Start(ctx)
	}
	n := s.App.StartDevNode(context.Background(), start, s.Creds, 30*time.Second)
	if n.Reason != "" || n.NodeID == "" || n.AllocationID == "" {
		t.Fatalf("dev node %+v", n)
	}
	defer n.Stop()
	if a.NodeID() != n.NodeID {
		t.Fatalf("agent is %s, dev node %s", a.NodeID(), n.NodeID)
	}
	ctx := principal.With(context.Background(), principal.SystemActor)
	inst := "inst-" + uuid.NewString()[:8]
	task, err := s.App.Nodes.EnqueueTask(ctx, nil, n.NodeID, nodeapi.KindTeardownVerify, nodeapi.TeardownVerify{InstanceID: inst}, inst, s.Creds.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := s.App.Nodes.Task(ctx, task.ID)
		if err == nil && got.State == nodeapi.ResultSucceeded {
			break
		}
		if err == nil && got.State == nodeapi.ResultFailed || time.Now().After(deadline) {
			t.Fatalf("task %+v %v", got.NodeTask, err)
		}
		time.Sleep(100 * time.Millisecond) // the agent runs in its own loop; no hook reaches into the server's task table
	}
	if a.executed.Load() != 1 {
		t.Fatalf("executed %d tasks", a.executed.Load())
	}
	// Re-delivery of the finished task (at-least-once delivery).
	a.handle(context.Background(), nodeapi.Task{ID: task.ID, NodeID: n.NodeID, Kind: nodeapi.KindTeardownVerify, InstanceID: inst,
		Payload: []byte(`{"instance_id":"` + inst + `"}`)})
	if a.executed.Load() != 1 {
		t.Fatalf("a re-delivered task ran again: executed %d", a.executed.Load())
	}
	if r, ok := a.results.Get(task.ID); !ok || r.State != nodeapi.ResultSucceeded {
		t.Fatalf("stored result %+v %v", r, ok)
	}
}
