package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// slurmManifest is a cluster app no node agent runs: an external worker
// of the app carries out its instances' operations.
func slurmManifest(slug string) func(version, imageRef string) map[string]any {
	return func(version, imageRef string) map[string]any {
		repo, _, _ := strings.Cut(imageRef, "@")
		_, repo, _ = strings.Cut(repo, "/")
		return map[string]any{
			"slug": slug, "display_name": "Slurm", "version": version, "runtime_backend": "slurm",
			"supported_modes": map[string]any{"operating_modes": []string{"tenant_dedicated"}, "control_plane_scopes": []string{"project"}},
			"compatibility":   map[string]any{"requires_capacity_shape": []string{"gpu_slice", "baremetal"}, "supported_accelerators": []string{"nvidia", "cpu"}},
			"artifacts":       []map[string]any{{"name": "runtime", "artifact_kind": "oci", "source_type": "oci_registry", "repository": repo}},
			"external_worker_contract": map[string]any{"delivery": "polling",
				"root":            map[string]any{"component_key": "controller", "allocation_id_key": "controller_allocation_id"},
				"child_operation": map[string]any{"component_key": "worker", "allocation_ids_key": "worker_allocation_ids"}},
		}
	}
}

// newWorker makes a service account in project pid and returns its key.
func newWorker(t *testing.T, e *instanceEnv, pid, slug string) (client.KeyFile, *servertest.Client) {
	t.Helper()
	sa := e.admin.Do("POST", "/api/v1/projects/"+pid+"/service-accounts", map[string]any{"name": slug, "slug": slug, "roles": []string{"project_viewer"}}).Want(t, 201)
	key := client.KeyFile{Type: client.KeyFileType, ServiceAccountID: sa.String("id"), KeyID: sa.String("key_id"),
		PrivateKeyPEM: sa.String("private_key_pem"), TokenURL: sa.String("token_url")}
	return key, e.s.AsServiceAccount(key)
}

// The external worker contract on both databases: grants, acquire with a
// lease (the same one again after a "crash"), nothing for a second worker
// meanwhile, heartbeats, complete (idempotent), the opaque state handed to
// the next operation, a failed upgrade leaving the instance on its version,
// an expired lease taken over by another worker (the first one's report
// refused), app isolation, a deadline that fails the operation and brings a
// cleanup, and decommission.
func TestExternalWorker(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		clk := clock.NewManual(time.Now().UTC().Truncate(time.Second))
		e := newInstanceEnv(t, d, "slurm", map[string]v1.Image{"1.0.0": nil, "2.0.0": nil}, slurmManifest("slurm"), 1, servertest.WithClock(clk), steadyNodes,
			func(c *config.Config) { c.WorkerLease, c.WorkerOperationTimeout = 10*time.Second, 30*time.Second })
		acquirePath, opPath := "/api/v1/apps/slurm/worker/acquire", func(id, verb string) string { return "/api/v1/apps/slurm/worker/operations/" + id + "/" + verb }
		aKey, a := newWorker(t, e, e.pid, "worker-a")
		bKey, b := newWorker(t, e, e.pid, "worker-b")
		if r := a.Do("POST", acquirePath, map[string]any{}); r.Status != 403 || !strings.Contains(string(r.Body), "not_app_worker") {
			t.Fatalf("an ungranted worker acquires: %d %s", r.Status, r.Body)
		}
		e.bot.Do("PUT", "/api/v1/admin/apps/slurm/workers/"+aKey.ServiceAccountID, nil).Want(t, 403)
		grant := e.admin.Do("PUT", "/api/v1/admin/apps/slurm/workers/"+aKey.ServiceAccountID, nil).Want(t, 200)
		if grant.String("project_id") != e.pid {
			t.Fatalf("grant: %s", grant.Body)
		}
		e.admin.Do("PUT", "/api/v1/admin/apps/slurm/workers/"+aKey.ServiceAccountID, nil).Want(t, 200) // again: the same grant
		e.admin.Do("PUT", "/api/v1/admin/apps/slurm/workers/"+bKey.ServiceAccountID, nil).Want(t, 200)
		if n := len(e.admin.Do("GET", "/api/v1/admin/apps/slurm/workers", nil).Want(t, 200).Items()); n != 2 {
			t.Fatalf("%d grants, want 2", n)
		}
		a.Do("POST", acquirePath, map[string]any{"wait_seconds": 21}).Want(t, 400)
		if r := a.Do("POST", acquirePath, map[string]any{}); r.Status != 204 || r.Header.Get("Retry-After") == "" {
			t.Fatalf("an empty acquire: %d %v", r.Status, r.Header)
		}

		cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "slurm", "version": "1.0.0", "display_name": "cluster"}).Want(t, 202)
		id := cr.String("id")
		got := a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		lease := got.String("lease_id")
		if got.String("operation_id") != cr.String("operation_id") || got.String("kind") != "create" || num(got, "attempt") != 1 ||
			got.String("app_instance_id") != id || str(got, "contract.root.component_key") != "controller" ||
			str(got, "artifacts.0.digest") != e.digests["1.0.0"] || jsonAt(got, "state") != nil {
			t.Fatalf("acquired: %s", got.Body)
		}
		if inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); inst.String("status") != "deploying" {
			t.Fatalf("an acquired create: %s", inst.Body)
		}
		// The worker "crashes" and acquires again: the same operation, the same lease.
		again := a.Do("POST", acquirePath, map[string]any{}).Want(t, 200)
		if again.String("operation_id") != got.String("operation_id") || again.String("lease_id") != lease {
			t.Fatalf("re-acquire: %s", again.Body)
		}
		b.Do("POST", acquirePath, map[string]any{}).Want(t, 204) // held by a
		if r := b.Do("POST", opPath(got.String("operation_id"), "heartbeat"), map[string]any{"lease_id": lease}); r.Status != 409 || !strings.Contains(string(r.Body), "lease_lost") {
			t.Fatalf("another worker heartbeats a's lease: %d %s", r.Status, r.Body)
		}
		if hb := a.Do("POST", opPath(got.String("operation_id"), "heartbeat"), map[string]any{"lease_id": lease, "message": "controller up"}).Want(t, 200); jsonAt(hb, "cancelled") != false {
			t.Fatalf("heartbeat: %s", hb.Body)
		}
		a.Do("POST", opPath(got.String("operation_id"), "complete"), map[string]any{"lease_id": "nope"}).Want(t, 409)
		a.Do("POST", opPath(got.String("operation_id"), "fail"), map[string]any{"lease_id": lease, "reason_code": "Bad Reason"}).Want(t, 400)
		done := a.Do("POST", opPath(got.String("operation_id"), "complete"), map[string]any{"lease_id": lease, "state": map[string]any{"n": 1},
			"access_url": "https://slurm.example/cluster"}).Want(t, 200)
		if done.String("state") != "succeeded" {
			t.Fatalf("complete: %s", done.Body)
		}
		if again := a.Do("POST", opPath(got.String("operation_id"), "complete"), map[string]any{"lease_id": lease}).Want(t, 200); again.String("state") != "succeeded" {
			t.Fatalf("a repeated complete: %s", again.Body)
		}
		inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
		if inst.String("status") != "running" || str(inst, "access.url") != "https://slurm.example/cluster" {
			t.Fatalf("after complete: %s", inst.Body)
		}

		// An upgrade the worker fails: the instance stays on 1.0.0, with the reason.
		up := e.bot.Do("POST", e.path("/app-instances/"+id+"/upgrade"), map[string]any{"target_version": "2.0.0"}).Want(t, 202)
		got = a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		if got.String("operation_id") != up.String("operation_id") || got.String("kind") != "upgrade" || num(got, "state.n") != 1 {
			t.Fatalf("acquired upgrade (with the create's state): %s", got.Body)
		}
		a.Do("POST", opPath(got.String("operation_id"), "fail"), map[string]any{"lease_id": got.String("lease_id"), "reason_code": "drain_timeout", "message": "nodes busy"}).Want(t, 200)
		inst = e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
		if inst.String("status") != "running" || inst.String("version") != "1.0.0" || inst.String("reason_code") != "drain_timeout" {
			t.Fatalf("after a failed upgrade: %s", inst.Body)
		}

		// a takes the next upgrade and goes silent; its lease expires and b takes over.
		up = e.bot.Do("POST", e.path("/app-instances/"+id+"/upgrade"), map[string]any{"target_version": "2.0.0"}).Want(t, 202)
		first := a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		b.Do("POST", acquirePath, map[string]any{}).Want(t, 204)
		clk.Advance(11 * time.Second)
		second := b.Do("POST", acquirePath, map[string]any{}).Want(t, 200)
		if second.String("operation_id") != up.String("operation_id") || second.String("lease_id") == first.String("lease_id") || num(second, "attempt") != 2 {
			t.Fatalf("takeover: %s", second.Body)
		}
		if hb := a.Do("POST", opPath(first.String("operation_id"), "heartbeat"), map[string]any{"lease_id": first.String("lease_id")}); hb.Status != 409 {
			t.Fatalf("the silent worker's heartbeat: %d %s", hb.Status, hb.Body)
		}
		b.Do("POST", opPath(second.String("operation_id"), "complete"), map[string]any{"lease_id": second.String("lease_id"), "state": map[string]any{"n": 2}}).Want(t, 200)
		a.Do("POST", opPath(first.String("operation_id"), "complete"), map[string]any{"lease_id": first.String("lease_id")}).Want(t, 409)
		if inst = e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); inst.String("version") != "2.0.0" || inst.String("status") != "running" {
			t.Fatalf("after the takeover: %s", inst.Body)
		}

		// Child operations: members of the contract's child component
		// (its component_key, "worker", is their role), acquired like any
		// operation; the instance stays running throughout.
		membersPath := e.path("/app-instances/" + id + "/members")
		if r := e.bot.Do("POST", membersPath, map[string]any{"role": "controller"}); r.Status != 400 || !strings.Contains(string(r.Body), "role_not_allowed") {
			t.Fatalf("a role the contract has no child for: %d %s", r.Status, r.Body)
		}
		add := e.bot.Do("POST", membersPath, map[string]any{"role": "worker", "count": 2}).Want(t, 202)
		e.bot.Do("POST", e.path("/app-instances/"+id+"/upgrade"), map[string]any{"target_version": "1.0.0"}).Want(t, 409) // busy
		got = a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		if got.String("kind") != "member_add" || got.String("operation_id") != add.String("operation_id") || str(got, "members.1.role") != "worker" ||
			str(got, "members.0.status") != "deploying" || str(got, "members.2.id") != "" || num(got, "state.n") != 2 {
			t.Fatalf("acquired member_add: %s", got.Body)
		}
		w1, w2 := str(got, "members.0.id"), str(got, "members.1.id")
		a.Do("POST", opPath(got.String("operation_id"), "complete"), map[string]any{"lease_id": got.String("lease_id")}).Want(t, 200)
		memberStatus := func(mid string) string {
			for _, m := range e.bot.Do("GET", membersPath, nil).Want(t, 200).Items() {
				if m["id"] == mid {
					s, _ := m["status"].(string)
					return s
				}
			}
			return ""
		}
		if memberStatus(w1) != "running" || memberStatus(w2) != "running" {
			t.Fatalf("after member_add: %s", e.bot.Do("GET", membersPath, nil).Body)
		}
		rm := e.bot.Do("POST", membersPath+"/"+w1+"/remove", nil).Want(t, 202)
		got = a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		if got.String("kind") != "member_remove" || got.String("operation_id") != rm.String("operation_id") || str(got, "members.0.id") != w1 || str(got, "members.1.id") != "" {
			t.Fatalf("acquired member_remove: %s", got.Body)
		}
		a.Do("POST", opPath(got.String("operation_id"), "complete"), map[string]any{"lease_id": got.String("lease_id")}).Want(t, 200)
		if memberStatus(w1) != "removed" || memberStatus(w2) != "running" {
			t.Fatalf("after member_remove: %s", e.bot.Do("GET", membersPath, nil).Body)
		}
		// A member the worker cannot bring up fails; recover brings it back.
		add = e.bot.Do("POST", membersPath, map[string]any{"role": "worker"}).Want(t, 202)
		w3 := str(add, "members.0.id")
		got = a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		a.Do("POST", opPath(got.String("operation_id"), "fail"), map[string]any{"lease_id": got.String("lease_id"), "reason_code": "node_drained", "message": "slurmd refused"}).Want(t, 200)
		if memberStatus(w3) != "failed" {
			t.Fatalf("after a failed member_add: %s", e.bot.Do("GET", membersPath, nil).Body)
		}
		if inst = e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); inst.String("status") != "running" {
			t.Fatalf("a failed child operation moved the instance: %s", inst.Body)
		}
		rec := e.bot.Do("POST", membersPath+"/"+w3+"/recover", nil).Want(t, 202)
		got = a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		if got.String("kind") != "member_recover" || got.String("operation_id") != rec.String("operation_id") || str(got, "members.0.id") != w3 {
			t.Fatalf("acquired member_recover: %s", got.Body)
		}
		a.Do("POST", opPath(got.String("operation_id"), "complete"), map[string]any{"lease_id": got.String("lease_id")}).Want(t, 200)
		if memberStatus(w3) != "running" {
			t.Fatalf("after member_recover: %s", e.bot.Do("GET", membersPath, nil).Body)
		}

		// The node agents do not watch a worker's members: a report of
		// their node without their containers, past the grace, changes
		// nothing.
		clk.Advance(31 * time.Second)
		if err := e.s.App.Instances.WorkloadsReported(context.Background(), e.node.id, nil); err != nil {
			t.Fatal(err)
		}
		if memberStatus(w2) != "running" || memberStatus(w3) != "running" {
			t.Fatalf("a node report moved a worker's members: %s", e.bot.Do("GET", membersPath, nil).Body)
		}

		// Releasing an allocation under a member of a busy instance waits;
		// released again once the instance's operation ended, it removes
		// the member (a child operation) and is released.
		allocX := e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 0, "sku": "cpu.0x", "node_id": e.node.id}).Want(t, 201).String("id")
		add = e.bot.Do("POST", membersPath, map[string]any{"role": "worker", "allocation_id": allocX}).Want(t, 202)
		w4 := str(add, "members.0.id")
		got = a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		a.Do("POST", opPath(got.String("operation_id"), "complete"), map[string]any{"lease_id": got.String("lease_id")}).Want(t, 200)
		up = e.bot.Do("POST", e.path("/app-instances/"+id+"/rollback"), map[string]any{"target_version": "1.0.0"}).Want(t, 202) // busy
		if rel := e.admin.Do("POST", "/api/v1/admin/allocations/"+allocX+"/release", nil).Want(t, 200); rel.String("state") != "releasing" || memberStatus(w4) != "running" {
			t.Fatalf("release under a busy instance's member: %s", rel.Body)
		}
		got = a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		if got.String("operation_id") != up.String("operation_id") {
			t.Fatalf("acquired instead of the rollback: %s", got.Body)
		}
		a.Do("POST", opPath(got.String("operation_id"), "complete"), map[string]any{"lease_id": got.String("lease_id")}).Want(t, 200)
		if rel := e.admin.Do("POST", "/api/v1/admin/allocations/"+allocX+"/release", nil).Want(t, 200); rel.String("state") != "releasing" {
			t.Fatalf("released again: %s", rel.Body)
		}
		got = a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		if got.String("kind") != "member_remove" || str(got, "members.0.id") != w4 {
			t.Fatalf("acquired after the second release: %s", got.Body)
		}
		a.Do("POST", opPath(got.String("operation_id"), "complete"), map[string]any{"lease_id": got.String("lease_id")}).Want(t, 200)
		if memberStatus(w4) != "removed" {
			t.Fatalf("the released allocation's member: %s", e.bot.Do("GET", membersPath, nil).Body)
		}
		if got := e.bot.Do("GET", e.path("/allocations/"+allocX), nil).Want(t, 200); got.String("state") != "released" {
			t.Fatalf("the allocation once its member is gone: %s", got.Body)
		}

		// A child operation past its deadline fails its members with
		// operation_timeout; the instance runs on, and no cleanup follows.
		add = e.bot.Do("POST", membersPath, map[string]any{"role": "worker"}).Want(t, 202)
		w5 := str(add, "members.0.id")
		a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		clk.Advance(31 * time.Second)
		if err := e.s.App.Instances.FailOverdue(context.Background()); err != nil {
			t.Fatal(err)
		}
		if op := e.bot.Do("GET", e.path("/operations/"+add.String("operation_id")), nil).Want(t, 200); op.String("state") != "failed" || op.String("reason_code") != "operation_timeout" {
			t.Fatalf("overdue member_add: %s", op.Body)
		}
		if inst = e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); memberStatus(w5) != "failed" || inst.String("status") != "running" {
			t.Fatalf("after an overdue member_add: %s\n%s", inst.Body, e.bot.Do("GET", membersPath, nil).Body)
		}
		rm = e.bot.Do("POST", membersPath+"/"+w5+"/remove", nil).Want(t, 202)
		got = a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		if got.String("operation_id") != rm.String("operation_id") {
			t.Fatalf("acquired after the timeout (no cleanup for a child operation): %s", got.Body)
		}
		a.Do("POST", opPath(got.String("operation_id"), "complete"), map[string]any{"lease_id": got.String("lease_id")}).Want(t, 200)

		// Isolation: a worker of another app sees nothing of this one's.
		e.admin.Do("POST", "/api/v1/admin/apps/manifests", echoManifest("other")("1.0.0", "registry.example/acme/other@"+e.digests["1.0.0"])).Want(t, 200, 201)
		cKey, c := newWorker(t, e, e.pid, "worker-c")
		e.admin.Do("PUT", "/api/v1/admin/apps/other/workers/"+cKey.ServiceAccountID, nil).Want(t, 200)
		dec := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
		c.Do("POST", "/api/v1/apps/other/worker/acquire", map[string]any{}).Want(t, 204)
		c.Do("POST", acquirePath, map[string]any{}).Want(t, 403)
		c.Do("POST", "/api/v1/apps/other/worker/operations/"+dec.String("operation_id")+"/heartbeat", map[string]any{"lease_id": "x"}).Want(t, 404)
		e.bot.Do("POST", acquirePath, map[string]any{}).Want(t, 403) // an operator is no worker
		got = a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		if got.String("kind") != "decommission" || num(got, "state.n") != 2 || str(got, "members.0.id") != w2 || str(got, "members.1.id") != w3 || str(got, "members.2.id") != "" {
			t.Fatalf("acquired decommission (with the live members to take down): %s", got.Body)
		}
		a.Do("POST", opPath(got.String("operation_id"), "complete"), map[string]any{"lease_id": got.String("lease_id")}).Want(t, 200)
		if inst = e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); inst.String("status") != "decommissioned" {
			t.Fatalf("after decommission: %s", inst.Body)
		}
		if memberStatus(w2) != "removed" || memberStatus(w3) != "removed" {
			t.Fatalf("members after decommission: %s", e.bot.Do("GET", membersPath, nil).Body)
		}
		var events []string
		for _, ev := range timeline(t, e, id) {
			if strings.Contains(ev, "member_") {
				events = append(events, strings.TrimPrefix(ev, "apps.instance."))
			}
		}
		if want := []string{"member_added", "member_added", "member_removed", "member_failed", "member_recovered", "member_added", "member_removed",
			"member_failed", "member_removed", "member_removed", "member_removed"}; !slices.Equal(events, want) {
			t.Fatalf("member events:\n got %v\nwant %v", events, want)
		}

		// Past its deadline an operation fails and a cleanup follows.
		late := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "slurm", "version": "1.0.0", "display_name": "late"}).Want(t, 202)
		a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		clk.Advance(31 * time.Second)
		if err := e.s.App.Instances.FailOverdue(context.Background()); err != nil {
			t.Fatal(err)
		}
		if op := e.bot.Do("GET", e.path("/operations/"+late.String("operation_id")), nil).Want(t, 200); op.String("state") != "failed" || op.String("reason_code") != "operation_timeout" {
			t.Fatalf("overdue: %s", op.Body)
		}
		inst = e.bot.Do("GET", e.path("/app-instances/"+late.String("id")), nil).Want(t, 200)
		cleanup := a.Do("POST", acquirePath, map[string]any{"wait_seconds": 5}).Want(t, 200)
		if inst.String("status") != "failed" || cleanup.String("kind") != "cleanup" || cleanup.String("operation_id") != inst.String("current_operation_id") {
			t.Fatalf("cleanup: %s\n%s", inst.Body, cleanup.Body)
		}
		a.Do("POST", opPath(cleanup.String("operation_id"), "complete"), map[string]any{"lease_id": cleanup.String("lease_id")}).Want(t, 200)
		if r := e.admin.Do("DELETE", "/api/v1/admin/apps/slurm/workers/"+aKey.ServiceAccountID, nil); r.Status != 204 {
			t.Fatalf("revoke: %d %s", r.Status, r.Body)
		}
		a.Do("POST", acquirePath, map[string]any{}).Want(t, 403)
	})
}

// The reference external worker (examples/external-worker, the public Go
// client and the Docker SDK, nothing of the platform's code) runs a
// worker-driven instance through create → running → upgrade → two members
// added (child operations) → one removed → decommission on the real Docker
// engine. Killed with SIGKILL while it
// holds the create, and started again, it gets the same operation back and
// completes it exactly once: one container, one completion on record.
func TestExternalWorkerDocker(t *testing.T) {
	t.Parallel()
	d := agenttest.RequireDocker(t)
	bin := testbin.Program(t, "./examples/external-worker")
	image := "gpuaas-ext-worker-test/" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + ":1"
	agenttest.BuildServerImage(t, d, image, "")
	t.Cleanup(d.RemoveImages)
	e := newInstanceEnv(t, store.SQLite, "slurm", map[string]v1.Image{"1.0.0": nil, "2.0.0": nil}, slurmManifest("slurm"), 0, steadyNodes)
	key, _ := newWorker(t, e, e.pid, "reference-worker")
	e.admin.Do("PUT", "/api/v1/admin/apps/slurm/workers/"+key.ServiceAccountID, nil).Want(t, 200)
	keyPath := filepath.Join(t.TempDir(), "worker-key.json")
	b, _ := json.Marshal(key)
	if err := os.WriteFile(keyPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "worker.log")
	start := func(extra ...string) *exec.Cmd {
		log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, append([]string{"--server", e.s.URL, "--key-file", keyPath, "--app", "slurm", "--image", image, "--poll-wait", "2"}, extra...)...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		return cmd
	}
	logs := func() string { b, _ := os.ReadFile(logPath); return string(b) }

	w := start("--hold", "60s")
	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "slurm", "version": "1.0.0", "display_name": "ref"}).Want(t, 202)
	id := cr.String("id")
	removeInstanceOnExit(t, d, id)
	waitStatus(t, e, id, "deploying") // acquired: the worker holds it
	if err := w.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = w.Wait()
	start() // again, without the hold: it gets its operation back
	if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("create: %s\n%s", op.Body, logs())
	}
	containers := func() []string {
		out := d.Must("", "ps", "-q", "--filter", "label=gpuaas.instance_id="+id)
		return strings.Fields(out)
	}
	if got := containers(); len(got) != 1 {
		t.Fatalf("containers of the instance after the create: %v\n%s", got, logs())
	}
	completions := 0
	evs, _, err := e.s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{Outcome: "success"}, store.Page{Limit: store.MaxPageLimit})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Action == "app_instance.operation_completed" && ev.ResourceID == id {
			completions++
		}
	}
	if completions != 1 {
		t.Fatalf("the create was completed %d times", completions)
	}
	if !strings.Contains(logs(), "attempt 1") || strings.Contains(logs(), "attempt 2") {
		t.Fatalf("the restarted worker did not get its own lease back:\n%s", logs())
	}

	up := e.bot.Do("POST", e.path("/app-instances/"+id+"/upgrade"), map[string]any{"target_version": "2.0.0"}).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, up.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("upgrade: %s\n%s", op.Body, logs())
	}
	if got := containers(); len(got) != 1 {
		t.Fatalf("containers after the upgrade: %v", got)
	}
	if lbl := strings.TrimSpace(d.Must("", "inspect", "--format", `{{index .Config.Labels "gpuaas.operation_id"}}`, "gpuaas-ext-"+id)); lbl != up.String("operation_id") {
		t.Fatalf("the upgrade did not replace the container (operation label %q)", lbl)
	}
	// Child operations: two members, each a container of its own; one
	// removed (its container gone), then the decommission takes the other.
	add := e.bot.Do("POST", e.path("/app-instances/"+id+"/members"), map[string]any{"role": "worker", "count": 2}).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, add.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("member_add: %s\n%s", op.Body, logs())
	}
	m1, m2 := str(add, "members.0.id"), str(add, "members.1.id")
	for _, name := range []string{str(add, "members.0.workload_name"), str(add, "members.1.workload_name")} {
		if env := d.Must("", "inspect", "--format", `{{.State.Running}} {{json .Config.Env}}`, name); !strings.HasPrefix(env, "true") || !strings.Contains(env, "GPUAAS_MEMBER_ROLE=worker") {
			t.Fatalf("member container %s: %s", name, env)
		}
	}
	if got := containers(); len(got) != 3 {
		t.Fatalf("containers with two members: %v", got)
	}
	rm := e.bot.Do("POST", e.path("/app-instances/"+id+"/members/"+m1+"/remove"), nil).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, rm.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("member_remove: %s\n%s", op.Body, logs())
	}
	if got := strings.Fields(d.Must("", "ps", "-aq", "--filter", "label=gpuaas.member_id="+m1)); len(got) != 0 {
		t.Fatalf("the removed member's container is still there: %v", got)
	}
	if got := strings.Fields(d.Must("", "ps", "-q", "--filter", "label=gpuaas.member_id="+m2)); len(got) != 1 {
		t.Fatalf("the other member's container: %v", got)
	}
	dec := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("decommission: %s\n%s", op.Body, logs())
	}
	if got := strings.Fields(d.Must("", "ps", "-aq", "--filter", "label=gpuaas.instance_id="+id)); len(got) != 0 {
		t.Fatalf("after decommission Docker still holds %v", got)
	}
	if inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); inst.String("status") != "decommissioned" {
		t.Fatalf("after decommission: %s", inst.Body)
	}
}

// BenchmarkWorkerRoundTrip: 100 workers of one app (each its own service
// account and token) take the app's pending create operations concurrently.
// A round trip is the platform's part of one operation's cycle: the acquire
// that leases it plus the complete that ends it. Workers poll as the
// contract asks (a long poll, wait_seconds 1), never in a tight loop.
// "saturated" workers acquire again the moment they complete (the
// platform's throughput, with 100 requests always queued); "work1s"
// workers, started over a second, spend 0.5 to 1.5 s (1 s on average) on
// each operation between acquire and complete, as a real worker does its
// work meanwhile (about 90 operations a second in all). It reports the p50
// and p99 of a round trip and round trips per second up to the last
// completion. The operations are queued (instances launched) before the
// timer starts.
func BenchmarkWorkerRoundTrip(b *testing.B) {
	const workers = 100
	storetest.EachDialect(b, func(b *testing.B, d store.Dialect) {
		e := newInstanceEnv(b, d, "slurm", map[string]v1.Image{"1.0.0": nil}, slurmManifest("slurm"), 0, steadyNodes)
		tokens := make([]string, workers)
		for i := range tokens {
			sa := e.admin.Do("POST", e.path("/service-accounts"), map[string]any{"name": fmt.Sprint("w", i), "slug": fmt.Sprint("w", i), "roles": []string{"project_viewer"}}).Want(b, 201)
			key := client.KeyFile{Type: client.KeyFileType, ServiceAccountID: sa.String("id"), KeyID: sa.String("key_id"),
				PrivateKeyPEM: sa.String("private_key_pem"), TokenURL: sa.String("token_url")}
			e.admin.Do("PUT", "/api/v1/admin/apps/slurm/workers/"+key.ServiceAccountID, nil).Want(b, 200)
			tokens[i] = e.s.AsServiceAccount(key).Token
		}
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
		post := func(url, token string, body any) (int, []byte, error) {
			raw, _ := json.Marshal(body)
			req, _ := http.NewRequest("POST", e.s.URL+url, bytes.NewReader(raw))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return 0, nil, err
			}
			defer resp.Body.Close()
			out, err := io.ReadAll(resp.Body)
			return resp.StatusCode, out, err
		}
		for _, mode := range []struct {
			name string
			work time.Duration
		}{{"saturated", 0}, {"work1s", time.Second}} {
			b.Run(fmt.Sprintf("workers%d/%s", workers, mode.name), func(b *testing.B) {
				b.StopTimer()
				for i := range b.N {
					e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "slurm", "version": "1.0.0", "display_name": fmt.Sprint("b", i)}).Want(b, 202)
				}
				var (
					mu    sync.Mutex
					lat   []time.Duration
					left  = int64(b.N)
					fails []error
				)
				var wg sync.WaitGroup
				start := time.Now()
				var last time.Time // the last completion
				b.StartTimer()
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if mode.work > 0 { // paced workers come up over a second
							time.Sleep(time.Duration(rand.Int64N(int64(time.Second))))
						}
						for atomic.LoadInt64(&left) > 0 {
							t0 := time.Now()
							code, body, err := post("/api/v1/apps/slurm/worker/acquire", tokens[w], map[string]any{"wait_seconds": 1})
							if err == nil && code == 204 {
								// Nothing left to take (the rest are held):
								// poll again, as a worker does.
								continue
							}
							took := time.Since(t0)
							var op struct{ OperationID, LeaseID string }
							if err == nil && code == 200 {
								var v map[string]any
								err = json.Unmarshal(body, &v)
								op.OperationID, _ = v["operation_id"].(string)
								op.LeaseID, _ = v["lease_id"].(string)
							} else if err == nil {
								err = fmt.Errorf("acquire: %d %s", code, body)
							}
							if err == nil {
								if mode.work > 0 { // the worker's own work
									time.Sleep(mode.work/2 + time.Duration(rand.Int64N(int64(mode.work))))
								}
								t1 := time.Now()
								code, body, err = post("/api/v1/apps/slurm/worker/operations/"+op.OperationID+"/complete", tokens[w], map[string]any{"lease_id": op.LeaseID})
								took += time.Since(t1)
								if err == nil && code != 200 {
									err = fmt.Errorf("complete: %d %s", code, body)
								}
							}
							mu.Lock()
							if err != nil {
								fails = append(fails, err)
								mu.Unlock()
								return
							}
							lat = append(lat, took)
							last = time.Now()
							mu.Unlock()
							atomic.AddInt64(&left, -1)
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				if len(fails) > 0 {
					b.Fatal(fails[0])
				}
				slices.Sort(lat)
				pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
				b.ReportMetric(pct(0.50), "p50-ms")
				b.ReportMetric(pct(0.99), "p99-ms")
				b.ReportMetric(float64(len(lat))/last.Sub(start).Seconds(), "roundtrips/s")
			})
		}
	})
}
