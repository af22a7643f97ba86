package agent

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
	"github.com/gpuaas/gpuaas/internal/agent/driver/drivertest"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// A workload that prints one long line of control bytes and exits, with an
// engine message past the server's 4 KiB: as reported, that result would be
// past the server's bounds (its body limit, the message limit), refused,
// and re-sent and refused at every redelivery, so the task would never
// complete. The agent cuts what it reports to fit, and the task fails with
// the workload's last words.
func TestOversizedFailureIsReportedWithinTheServersBounds(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	jt := s.Admin().Do("POST", "/api/v1/admin/nodes/join-tokens", map[string]any{"description": "bounds"}).Want(t, 201).String("join_token")
	f := &drivertest.Fake{Errs: map[string]error{"Run": &driver.Failure{Reason: nodeapi.ReasonContainerExited,
		Message: "start: " + strings.Repeat("é", 8<<10),
		LogTail: []string{strings.Repeat("\x01", 300<<10), "last words"}}}}
	a := newFakeAgent(t, f, func(c *Config) { c.Server, c.JoinToken, c.PollWait = s.URL, jt, 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sys := principal.With(context.Background(), principal.SystemActor)
	task, err := s.App.Nodes.EnqueueTask(sys, nil, a.NodeID(), nodeapi.KindContainerRun,
		nodeapi.ContainerRun{Name: "x", Image: nodeapi.ImagePull{Repository: "registry.test/app", Digest: pinned}}, "inst-1", s.Creds.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := s.App.Nodes.Task(sys, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == nodeapi.ResultFailed {
			if got.ReasonCode != nodeapi.ReasonContainerExited || len(got.Message) > maxResultMessage || !utf8.ValidString(got.Message) {
				t.Fatalf("result: %s, message of %d bytes", got.ReasonCode, len(got.Message))
			}
			break
		}
		if got.State == nodeapi.ResultSucceeded || time.Now().After(deadline) {
			t.Fatalf("task %s: the agent's result never got through", got.State)
		}
		time.Sleep(50 * time.Millisecond) // the agent runs in its own loops; nothing in the server announces a result to a test
	}
	res, ok := a.results.Get(task.ID)
	if !ok || len(res.LogTail) == 0 || res.LogTail[len(res.LogTail)-1] != "last words" {
		t.Fatalf("stored result %v: log tail %q", ok, res.LogTail)
	}
}
