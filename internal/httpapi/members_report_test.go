package httpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// memberReportEnv is a running cluster instance on node-a and a second
// simulated node, node-b, with an allocation that members can be added
// to.
type memberReportEnv struct {
	*instanceEnv
	nodeB  *simNode
	allocB string
	id     string
}

// newMemberReportEnv starts the instance; node-b answers its tasks with
// decideB.
func newMemberReportEnv(t *testing.T, d store.Dialect, decideB func(nodeapi.Task) nodeapi.TaskResult, opts ...servertest.Option) *memberReportEnv {
	t.Helper()
	e := newInstanceEnv(t, d, "cluster", map[string]v1.Image{"1.0.0": nil}, clusterManifest("cluster"), 1, opts...)
	e.node.serve(t, okResult)
	m := &memberReportEnv{instanceEnv: e, nodeB: joinSimNode(t, e.s, e.admin, "node-b", 2)}
	m.nodeB.serve(t, decideB)
	m.allocB = e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 2, "sku": "test.2x", "node_id": m.nodeB.id}).Want(t, 201).String("id")
	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "cluster", "version": "1.0.0", "display_name": "slurm",
		"resources": map[string]any{"gpu_count": 1}}).Want(t, 202)
	m.id = cr.String("id")
	if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("create: %s", op.Body)
	}
	return m
}

// addWorker asks for one worker on node-b and returns the add's operation
// id.
func (m *memberReportEnv) addWorker(t *testing.T) string {
	t.Helper()
	return m.bot.Do("POST", m.path("/app-instances/"+m.id+"/members"), map[string]any{"role": "worker", "allocation_id": m.allocB, "count": 1}).Want(t, 202).String("operation_id")
}

// waitStored waits until node-b's stored report contains want.
func (m *memberReportEnv) waitStored(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, err := store.Nodes(m.s.DB).Read().GetNode(context.Background(), m.nodeB.id)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(n.Workloads), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-b's stored report %s never held %s", n.Workloads, want)
		}
	}
}

// A replica stored node-b's report that a member's container exited and
// died before it acted on it (or acting on it failed): node-b goes on
// reporting that same list, so no beat changes the stored report again.
// The member still fails, container_exited.
func TestMemberFailsWhenItsReportWasStoredButNotActedOn(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		m := newMemberReportEnv(t, d, okResult)
		if op := waitOp(t, m.bot, m.pid, m.addWorker(t)); op.String("state") != "succeeded" {
			t.Fatalf("add: %s", op.Body)
		}
		w := waitMember(t, m.instanceEnv, m.id, "worker-1", "running")["workload_name"].(string)
		m.nodeB.resume([]nodeapi.Workload{{InstanceID: m.id, ContainerID: "c1", Name: "/" + w, State: "running"}})
		m.waitStored(t, `"running"`)

		// node-b's agent pauses; the exited report is stored as by a
		// replica that died before its hook, and node-b resumes reporting
		// exactly that.
		m.nodeB.pause()
		time.Sleep(1500 * time.Millisecond) // a beat in flight lands first
		exited := []nodeapi.Workload{{InstanceID: m.id, ContainerID: "c1", Name: "/" + w, State: "exited"}}
		raw, err := json.Marshal(exited)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Nodes(m.s.DB).Read().SetNodeWorkloads(context.Background(), m.nodeB.id, raw, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got := memberByName(t, m.instanceEnv, m.id)["worker-1"]; got["status"] != "running" {
			t.Fatalf("setup: worker-1 is %v before node-b resumed", got["status"])
		}
		m.nodeB.resume(exited)
		if got := waitMember(t, m.instanceEnv, m.id, "worker-1", "failed"); got["reason_code"] != "container_exited" {
			t.Fatalf("worker-1: %v", got)
		}
		if inst := m.bot.Do("GET", m.path("/app-instances/"+m.id), nil).Want(t, 200); inst.String("status") != "running" {
			t.Fatalf("a member's failure moved the instance: %s", inst.Body)
		}
	})
}

// node-b reports a member's container exited before the member's add
// completed (its run result arrives after the report): the report does not
// change once the member is running, and the member still fails,
// container_exited.
func TestMemberFailsWhenItsExitWasReportedBeforeItRan(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		var (
			mu       sync.Mutex
			withheld []nodeapi.Task
		)
		m := newMemberReportEnv(t, d, func(task nodeapi.Task) nodeapi.TaskResult {
			var run nodeapi.ContainerRun
			if task.Kind == nodeapi.KindContainerRun && json.Unmarshal(task.Payload, &run) == nil && run.Labels[nodeapi.LabelMember] != "" {
				mu.Lock()
				defer mu.Unlock()
				withheld = append(withheld, task)
				return nodeapi.TaskResult{} // posted by the test below
			}
			return okResult(task)
		})
		opID := m.addWorker(t)
		var run nodeapi.Task
		for deadline := time.Now().Add(30 * time.Second); run.ID == ""; time.Sleep(20 * time.Millisecond) {
			mu.Lock()
			if len(withheld) > 0 {
				run = withheld[0]
			}
			mu.Unlock()
			if time.Now().After(deadline) {
				t.Fatal("node-b never received the member's run task")
			}
		}
		w := memberByName(t, m.instanceEnv, m.id)["worker-1"]["workload_name"].(string)
		m.nodeB.resume([]nodeapi.Workload{{InstanceID: m.id, ContainerID: "c1", Name: "/" + w, State: "exited"}})
		m.waitStored(t, `"exited"`)
		if got := memberByName(t, m.instanceEnv, m.id)["worker-1"]; got["status"] != "deploying" {
			t.Fatalf("setup: worker-1 is %v while its run is withheld", got["status"])
		}
		m.nodeB.c.Do("POST", "/api/v1/nodes/"+m.nodeB.id+"/tasks/"+run.ID+"/result", okResult(run)).Want(t, 200, 204)
		if op := waitOp(t, m.bot, m.pid, opID); op.String("state") != "succeeded" {
			t.Fatalf("add: %s", op.Body)
		}
		if got := waitMember(t, m.instanceEnv, m.id, "worker-1", "failed"); got["reason_code"] != "container_exited" {
			t.Fatalf("worker-1: %v", got)
		}
	})
}

// A member's container is gone from node-b's report within memberGrace of
// the member running: the changed report leaves it running, and once the
// grace passed it fails, workload_missing, though the report never changed
// again. The server's clock is the test's (node-b's beats stay current:
// the heartbeat TTL is long).
func TestMemberFailsOnceItsGraceForAMissingWorkloadPassed(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		clk := clock.NewManual(time.Now().UTC().Truncate(time.Second)) // near the wall clock the test clients sign with
		m := newMemberReportEnv(t, d, okResult, servertest.WithClock(clk), steadyNodes)
		if op := waitOp(t, m.bot, m.pid, m.addWorker(t)); op.String("state") != "succeeded" {
			t.Fatalf("add: %s", op.Body)
		}
		waitMember(t, m.instanceEnv, m.id, "worker-1", "running")
		clk.Advance(time.Second)
		m.nodeB.resume([]nodeapi.Workload{{InstanceID: "other", ContainerID: "c9", Name: "/unrelated", State: "running"}})
		m.waitStored(t, "unrelated")
		clk.Advance(10 * time.Second) // within the grace, past a member check
		time.Sleep(6 * time.Second)   // a driver pass (5 s) runs the check
		if got := memberByName(t, m.instanceEnv, m.id)["worker-1"]; got["status"] != "running" {
			t.Fatalf("worker-1 within its grace: %v", got)
		}
		clk.Advance(20 * time.Second) // the grace (30 s) passed
		if got := waitMember(t, m.instanceEnv, m.id, "worker-1", "failed"); got["reason_code"] != "workload_missing" {
			t.Fatalf("worker-1: %v", got)
		}
	})
}
