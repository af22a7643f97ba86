package httpapi_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest/fleet"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
	"github.com/gpuaas/gpuaas/internal/agent/driver/drivertest"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// fleetEnv is an instanceEnv (app "echo" 1.0.0 published and entitled)
// whose nodes are a fleet of real in-process agents on fake drivers.
func fleetEnv(t *testing.T, d store.Dialect, n int, opts []fleet.Option, srv ...servertest.Option) (*instanceEnv, *fleet.Fleet, context.Context) {
	t.Helper()
	s := servertest.Start(t, d, srv...)
	e := setupInstanceEnv(t, s, "echo", map[string]v1.Image{"1.0.0": nil}, echoManifest("echo"), -1)
	f := fleet.Start(t, s, n, opts...)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	f.Must(f.WaitReady(ctx))
	return e, f, ctx
}

// launchOn places a one-GPU allocation of the project on agent i's node
// and creates an echo instance on it; it returns the instance id.
func launchOn(t *testing.T, e *instanceEnv, f *fleet.Fleet, i int) string {
	t.Helper()
	alloc := e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 1, "sku": "test.1x",
		"node_id": f.Agents[i].NodeID}).Want(t, 201).String("id")
	return e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "fleet",
		"target_allocation_id": alloc}).Want(t, 202).String("id")
}

// Three real agents join with join tokens and become ready; an instance
// launched onto an allocation on the second runs there with the digest it
// pinned, and is decommissioned with a verified teardown. Only the second
// agent's driver was asked to do anything.
func TestFleetRunsAnInstanceOnItsNode(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			e, f, ctx := fleetEnv(t, d, 3, nil)
			for _, m := range f.Agents {
				inv := e.admin.Do("GET", "/api/v1/admin/nodes/"+m.NodeID, nil).Want(t, 200)
				if inv.String("name") != m.Name || !strings.Contains(string(inv.Body), "GPU-"+m.Name+"-0") {
					t.Fatalf("node of %s: %s", m.Name, inv.Body)
				}
			}
			id := launchOn(t, e, f, 1)
			got, err := f.WaitInstance(ctx, e.pid, id, "running")
			f.Must(err)
			if got.String("digest") != e.digests["1.0.0"] || got.String("node_id") != f.Agents[1].NodeID {
				t.Fatalf("running: %s", got.Body)
			}
			if ws, _ := f.Agents[1].Driver.Workloads(ctx); len(ws) != 1 || ws[0].InstanceID != id {
				t.Fatalf("agent 2 runs %+v", ws)
			}

			e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
			_, err = f.WaitInstance(ctx, e.pid, id, "decommissioned")
			f.Must(err)
			// Decommission removes the container, then the instance's
			// scratch path and files, then verifies nothing remains.
			if calls := f.Agents[1].TaskCalls(); !slices.Equal(calls, []string{"Run", "Remove", "Remove", "Verify"}) {
				t.Fatalf("agent 2's driver calls: %v", calls)
			}
			for _, i := range []int{0, 2} {
				if calls := f.Agents[i].TaskCalls(); len(calls) != 0 {
					t.Fatalf("agent %d's driver calls: %v", i+1, calls)
				}
			}
		})
	}
}

// A driver whose Run fails with a reason fails the instance with that
// reason, message and log tail, visible through the API.
func TestFleetRunFailureFailsTheInstance(t *testing.T) {
	t.Parallel()
	fake := &drivertest.Fake{Errs: map[string]error{"Run": &driver.Failure{Reason: nodeapi.ReasonContainerExited, Message: "exited with 3",
		LogTail: []string{"boom: this release exits before it is ready"}}}}
	e, f, ctx := fleetEnv(t, store.SQLite, 1, []fleet.Option{fleet.ForAgent(0, func(s *fleet.Spec) { s.Driver = fake })})
	id := launchOn(t, e, f, 0)
	got, err := f.WaitInstance(ctx, e.pid, id, "failed")
	f.Must(err)
	if got.String("reason_code") != nodeapi.ReasonContainerExited || !strings.Contains(got.String("reason_message"), "exited with 3") {
		t.Fatalf("failed: %s", got.Body)
	}
	if logs := e.bot.Do("GET", e.path("/app-instances/"+id+"/logs"), nil).Want(t, 200); !strings.Contains(string(logs.Body), "boom") {
		t.Fatalf("logs: %s", logs.Body)
	}
}

// An agent that dies: the control plane's liveness marks its node down
// and its instance failed with node_lost, while the other node stays
// ready; restarted on its data dir, the agent is the same node, reports
// the workload its driver still runs, and the instance runs again without
// a redeploy.
//
// Serial (no t.Parallel): with a 3 s TTL, the node that stays must beat in
// time, and other tests' load may delay its agent's heartbeat.
func TestFleetNodeLoss(t *testing.T) {
	e, f, ctx := fleetEnv(t, store.SQLite, 2, nil, func(c *config.Config) {
		c.NodeHeartbeatTTL, c.NodeHeartbeatGrace = 3*time.Second, time.Second
	})
	id := launchOn(t, e, f, 1)
	_, err := f.WaitInstance(ctx, e.pid, id, "running")
	f.Must(err)

	f.Agents[1].Stop()
	got, err := f.WaitInstance(ctx, e.pid, id, "failed")
	f.Must(err)
	if got.String("reason_code") != "node_lost" {
		t.Fatalf("node loss: %s", got.Body)
	}
	if st := f.NodeState(1); st != "down" {
		t.Fatalf("lost node is %s", st)
	}
	if st := f.NodeState(0); st != "ready" {
		t.Fatalf("the other node is %s", st)
	}

	f.Agents[1].Restart()
	f.Must(f.WaitNode(ctx, 1, "ready"))
	_, err = f.WaitInstance(ctx, e.pid, id, "running")
	f.Must(err)
	if calls := f.Agents[1].TaskCalls(); !slices.Equal(calls, []string{"Run"}) {
		t.Fatalf("agent 2's driver calls: %v", calls)
	}
}
