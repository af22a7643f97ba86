package httpapi_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/instances/instancetest"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// clusterManifest is the echo app as a cluster app: operators may add up
// to three workers.
func clusterManifest(slug string) func(version, imageRef string) map[string]any {
	return withRuntimeProfile(echoManifest(slug), func(p map[string]any) {
		p["members"] = map[string]any{"roles": []string{"worker"}, "max_count": 3}
	})
}

// memberRuns are the run tasks a node received for a member workload.
func memberRuns(n *simNode, workload string) []nodeapi.ContainerRun {
	var out []nodeapi.ContainerRun
	for _, task := range n.tasks() {
		var run nodeapi.ContainerRun
		if task.Kind == nodeapi.KindContainerRun && json.Unmarshal(task.Payload, &run) == nil && run.Name == workload {
			out = append(out, run)
		}
	}
	return out
}

// memberByName reads an instance's members keyed by name (added ones) or
// workload name.
func memberByName(t *testing.T, e *instanceEnv, id string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, m := range e.bot.Do("GET", e.path("/app-instances/"+id+"/members?limit=100"), nil).Want(t, 200).Items() {
		if name, _ := m["name"].(string); name != "" {
			out[name] = m
		}
	}
	return out
}

// waitMember waits until the named member has status.
func waitMember(t *testing.T, e *instanceEnv, id, name, status string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := memberByName(t, e, id)[name]
		if m["status"] == status {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %s is %v, want %s: %v", name, m["status"], status, m)
		}
		time.Sleep(50 * time.Millisecond) // waiting for the node's report or the driver
	}
}

// Members of a cluster app, against simulated nodes on both databases: add
// two workers on a second node (refusals name their field first), remove
// one (its container removed and its absence verified by name on its
// node, its key dead), one whose container exits fails, recover it, lose
// the second node (node_lost) and get the member back when the node
// returns still running it, upgrade the instance with its members, and
// decommission removes everything on both nodes.
//
// Serial (no t.Parallel): node loss needs a 2 s heartbeat TTL.
func TestInstanceMembers(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		e := newInstanceEnv(t, d, "cluster", map[string]v1.Image{"1.0.0": nil, "2.0.0": nil}, clusterManifest("cluster"), 1, func(c *config.Config) {
			c.NodeHeartbeatTTL, c.NodeHeartbeatGrace = 2*time.Second, time.Second
		})
		e.node.serve(t, okResult)
		nodeB := joinSimNode(t, e.s, e.admin, "node-b", 2)
		nodeB.serve(t, okResult)
		allocB := e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 2, "sku": "test.2x", "node_id": nodeB.id}).Want(t, 201).String("id")

		cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "cluster", "version": "1.0.0", "display_name": "slurm",
			"resources": map[string]any{"gpu_count": 1}}).Want(t, 202)
		id := cr.String("id")
		if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("create: %s", op.Body)
		}
		members := e.path("/app-instances/" + id + "/members")
		// The instance reports the GPU of its allocation it was given.
		if gpus, _ := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200).JSON["gpu_uuids"].([]any); len(gpus) != 1 || gpus[0] == "" {
			t.Fatalf("the instance's gpu_uuids: %v, want node-a's one GPU", gpus)
		}

		// Refusals name the field and say why.
		for _, c := range []struct {
			body       map[string]any
			field, why string
		}{
			{map[string]any{"allocation_id": allocB}, "/role", "required"},
			{map[string]any{"role": "head", "allocation_id": allocB}, "/role", "role_not_allowed"},
			{map[string]any{"role": "worker", "allocation_id": allocB, "count": 17}, "/count", "out_of_range"},
			{map[string]any{"role": "worker", "allocation_id": allocB, "count": 4}, "/count", "too_many_members"},
			{map[string]any{"role": "worker", "allocation_id": "no-such-allocation"}, "/allocation_id", "not_found"},
			{map[string]any{"role": "worker", "allocation_id": allocB, "count": 3}, "/count", "gpus_in_use"},
			{map[string]any{"role": "worker", "count": 1}, "/count", "gpus_in_use"}, // the instance holds node-a's one GPU
		} {
			r := e.bot.Do("POST", members, c.body)
			if r.Status != 400 || !strings.Contains(string(r.Body), c.field) || !strings.Contains(string(r.Body), c.why) {
				t.Fatalf("add %v: %d %s, want 400 at %s (%s)", c.body, r.Status, r.Body, c.field, c.why)
			}
		}

		add := e.bot.Do("POST", members, map[string]any{"role": "worker", "allocation_id": allocB, "count": 2}).Want(t, 202)
		if str(add, "operation.kind") != "member_add" || len(add.JSON["members"].([]any)) != 2 || str(add, "members.0.status") != "deploying" {
			t.Fatalf("add: %s", add.Body)
		}
		if op := waitOp(t, e.bot, e.pid, add.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("add: %s", op.Body)
		}
		ms := memberByName(t, e, id)
		w1, w2 := ms["worker-1"], ms["worker-2"]
		if w1["status"] != "running" || w2["status"] != "running" || w1["node_id"] != nodeB.id || w1["added"] != true || w1["role"] != "worker" {
			t.Fatalf("members after the add: %v", ms)
		}
		gpus := func(m map[string]any) string { return fmt.Sprint(m["gpu_uuids"]) }
		if gpus(w1) == gpus(w2) || len(w1["gpu_uuids"].([]any)) != 1 {
			t.Fatalf("members share GPUs: %s and %s", gpus(w1), gpus(w2))
		}
		w1Workload := w1["workload_name"].(string)
		runs := memberRuns(nodeB, w1Workload)
		if len(runs) != 1 || runs[0].Env["GPUAAS_MEMBER_ROLE"] != "worker" || runs[0].Env["GPUAAS_MEMBER_NAME"] != "worker-1" ||
			runs[0].Labels[nodeapi.LabelMember] != w1["id"] || runs[0].Ports[0].Host != 0 || len(runs[0].Mounts) == 0 {
			t.Fatalf("worker-1's run task on node-b: %+v", runs)
		}
		if len(memberRuns(e.node, w1Workload)) != 0 {
			t.Fatal("node-a received a member placed on node-b")
		}
		// Each member holds a key of its own to the instance's identity.
		var key client.KeyFile
		if err := json.Unmarshal(runs[0].Mounts[0].Content, &key); err != nil {
			t.Fatal(err)
		}
		w1Identity := e.s.AsServiceAccount(key)
		w1Identity.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
		workloadClient(t, e, id).Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)

		// Who may change members: not another project's operator (404),
		// not the instance's own identity (403).
		other := e.admin.Do("POST", "/api/v1/orgs/"+e.s.Creds.OrgID+"/projects", map[string]string{"slug": "other", "name": "Other"}).Want(t, 201).String("id")
		osa := e.admin.Do("POST", "/api/v1/projects/"+other+"/service-accounts", map[string]any{"name": "op", "slug": "op", "roles": []string{"app_operator"}}).Want(t, 201)
		stranger := e.s.AsServiceAccount(client.KeyFile{Type: client.KeyFileType, ServiceAccountID: osa.String("id"), KeyID: osa.String("key_id"),
			PrivateKeyPEM: osa.String("private_key_pem"), TokenURL: osa.String("token_url")})
		for _, p := range []string{"", "/" + w1["id"].(string) + "/remove", "/" + w1["id"].(string) + "/recover"} {
			stranger.Do("POST", "/api/v1/projects/"+other+"/app-instances/"+id+"/members"+p, map[string]any{"role": "worker"}).Want(t, 404)
			w1Identity.Do("POST", members+p, map[string]any{"role": "worker"}).Want(t, 403)
		}
		if r := e.bot.Do("POST", members+"/"+w1["id"].(string)+"/recover", nil); r.Status != 409 || !strings.Contains(string(r.Body), "member_not_failed") {
			t.Fatalf("recovering a running member: %d %s", r.Status, r.Body)
		}

		// Remove worker-1: removed by name on node-b, verified by name, its key dead.
		rm := e.bot.Do("POST", members+"/"+w1["id"].(string)+"/remove", nil).Want(t, 202)
		if op := waitOp(t, e.bot, e.pid, rm.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("remove: %s", op.Body)
		}
		var removed, verified bool
		for _, task := range nodeB.tasks() {
			switch task.Kind {
			case nodeapi.KindContainerRemove:
				var ref nodeapi.ContainerRef
				_ = json.Unmarshal(task.Payload, &ref)
				removed = removed || ref.Name == w1Workload
			case nodeapi.KindTeardownVerify:
				var v nodeapi.TeardownVerify
				_ = json.Unmarshal(task.Payload, &v)
				verified = verified || slices.Equal(v.Names, []string{w1Workload})
			}
		}
		if !removed || !verified || memberByName(t, e, id)["worker-1"]["status"] != "removed" {
			t.Fatalf("remove: removed=%v verified=%v %v", removed, verified, memberByName(t, e, id)["worker-1"])
		}
		if r := w1Identity.Do("GET", e.path("/app-instances/"+id), nil); r.Status != 401 {
			t.Fatalf("a removed member's token still works: %d %s", r.Status, r.Body)
		}
		assertion, err := client.SignAssertion(key, key.TokenURL, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if r := e.s.Anonymous().Do("POST", "/api/v1/auth/service-account/token", map[string]string{"grant_type": client.GrantTypeJWTBearer, "assertion": assertion}); r.Status != 400 || !strings.Contains(string(r.Body), "key_revoked") {
			t.Fatalf("a removed member's key still signs: %d %s", r.Status, r.Body)
		}
		workloadClient(t, e, id).Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200) // the instance's own key lives on
		e.bot.Do("POST", members+"/"+w1["id"].(string)+"/remove", nil).Want(t, 409)

		// worker-2's container exits: node-b says so, the member fails.
		w2Workload := w2["workload_name"].(string)
		nodeB.resume([]nodeapi.Workload{{InstanceID: id, ContainerID: "c2", Name: "/" + w2Workload, State: "exited"}})
		if m := waitMember(t, e, id, "worker-2", "failed"); m["reason_code"] != "container_exited" {
			t.Fatalf("exited member: %v", m)
		}
		if inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); inst.String("status") != "running" {
			t.Fatalf("a member's failure moved the instance: %s", inst.Body)
		}
		rec := e.bot.Do("POST", members+"/"+w2["id"].(string)+"/recover", nil).Want(t, 202)
		nodeB.resume([]nodeapi.Workload{{InstanceID: id, ContainerID: "c3", Name: "/" + w2Workload, State: "running"}})
		if op := waitOp(t, e.bot, e.pid, rec.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("recover: %s", op.Body)
		}
		waitMember(t, e, id, "worker-2", "running")
		if n := len(memberRuns(nodeB, w2Workload)); n != 2 {
			t.Fatalf("worker-2 ran %d times, want 2 (add, recover)", n)
		}

		// node-b goes silent: its member fails with node_lost, the instance
		// on node-a runs on; node-b returns still running it.
		nodeB.pause()
		if m := waitMember(t, e, id, "worker-2", "failed"); m["reason_code"] != "node_lost" {
			t.Fatalf("member on a lost node: %v", m)
		}
		if inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); inst.String("status") != "running" {
			t.Fatalf("another node's loss moved the instance: %s", inst.Body)
		}
		nodeB.resume([]nodeapi.Workload{{InstanceID: id, ContainerID: "c3", Name: "/" + w2Workload, State: "running"}})
		waitMember(t, e, id, "worker-2", "running")

		// An upgrade redeploys the members with the instance.
		up := e.bot.Do("POST", e.path("/app-instances/"+id+"/upgrade"), map[string]any{"target_version": "2.0.0"}).Want(t, 202)
		if op := waitOp(t, e.bot, e.pid, up.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("upgrade: %s", op.Body)
		}
		if m := memberByName(t, e, id)["worker-2"]; m["version"] != "2.0.0" || m["status"] != "running" || m["digest"] != e.digests["2.0.0"] {
			t.Fatalf("worker-2 after the upgrade: %v", m)
		}
		if runs := memberRuns(nodeB, w2Workload); runs[len(runs)-1].Image.Digest != e.digests["2.0.0"] {
			t.Fatalf("worker-2 was not redeployed at 2.0.0: %+v", runs[len(runs)-1].Image)
		}

		// Releasing node-b's allocation removes the members on it first; it
		// is released once they are gone, and the instance runs on.
		rel := e.admin.Do("POST", "/api/v1/admin/allocations/"+allocB+"/release", nil).Want(t, 200)
		if rel.String("state") != "releasing" {
			t.Fatalf("release under a member: %s", rel.Body)
		}
		waitMember(t, e, id, "worker-2", "removed")
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) { // the release ends with the removal
			if got := e.bot.Do("GET", e.path("/allocations/"+allocB), nil).Want(t, 200); got.String("state") == "released" {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("allocation after its members went: %s", got.Body)
			}
		}
		if inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); inst.String("status") != "running" {
			t.Fatalf("the release of a member's allocation moved the instance: %s", inst.Body)
		}

		// Decommission removes and verifies on both nodes.
		dec := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
		if op := waitOp(t, e.bot, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("decommission: %s", op.Body)
		}
		for _, n := range []*simNode{e.node} { // node-b's members went with its allocation
			var verify bool
			for _, task := range n.tasks() {
				var v nodeapi.TeardownVerify
				if task.Kind == nodeapi.KindTeardownVerify && json.Unmarshal(task.Payload, &v) == nil && v.InstanceID == id && v.Names == nil {
					verify = true
				}
			}
			if !verify {
				t.Fatalf("node %s never verified the instance's teardown", n.id)
			}
		}
		for name, m := range memberByName(t, e, id) {
			if m["status"] != "removed" {
				t.Fatalf("after decommission member %s is %v", name, m["status"])
			}
		}
		var events []string
		for _, ev := range timeline(t, e, id) {
			if strings.Contains(ev, "member_") {
				events = append(events, strings.TrimPrefix(ev, "apps.instance."))
			}
		}
		want := []string{"member_added", "member_added", "member_removed", "member_failed", "member_recovered", "member_failed", "member_recovered", "member_removed"}
		if !slices.Equal(events, want) {
			t.Fatalf("member events:\n got %v\nwant %v", events, want)
		}
	})
}

// A version without members refuses them, naming the manifest field.
func TestInstanceMembersNotDeclared(t *testing.T) {
	t.Parallel()
	e := newInstanceEnv(t, store.SQLite, "solo", map[string]v1.Image{"1.0.0": nil}, echoManifest("solo"), 1)
	e.node.serve(t, okResult)
	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "solo", "version": "1.0.0", "display_name": "solo"}).Want(t, 202)
	waitOp(t, e.bot, e.pid, cr.String("operation_id"))
	r := e.bot.Do("POST", e.path("/app-instances/"+cr.String("id")+"/members"), map[string]any{"role": "worker"})
	if r.Status != 400 || !strings.Contains(string(r.Body), "members_not_supported") || !strings.Contains(string(r.Body), "runtime_profile.members") {
		t.Fatalf("members of a version without them: %d %s", r.Status, r.Body)
	}
	own := e.bot.Do("GET", e.path("/app-instances/"+cr.String("id")+"/members"), nil).Want(t, 200).Items()
	if len(own) == 0 {
		t.Fatal("no members listed")
	}
	if r := e.bot.Do("POST", e.path("/app-instances/"+cr.String("id")+"/members/"+own[0]["id"].(string)+"/remove"), nil); r.Status != 409 || !strings.Contains(string(r.Body), "member_not_added") {
		t.Fatalf("removing the instance's own workload: %d %s", r.Status, r.Body)
	}
}

// clusterAppImage builds the reference cluster app (examples/cluster-app,
// what gpuaas init --template controller writes: a module of its own) as a
// static binary in an image FROM scratch.
func clusterAppImage(t *testing.T) v1.Image {
	t.Helper()
	out := filepath.Join(t.TempDir(), "cluster-app")
	testbin.Static(t, filepath.Join("..", "..", "examples", "cluster-app"), out, "")
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return instancetest.Image(t, bin)
}

// appReported waits until the instance's timeline has a runtime event of
// typ that the app itself reported about member, n times in all.
func appReported(t *testing.T, e *instanceEnv, id, typ, member string, n int) {
	t.Helper()
	got := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		got = 0
		for _, ev := range e.bot.Do("GET", e.path("/app-instances/"+id+"/events?limit=200"), nil).Want(t, 200).Items() {
			if ev["event_type"] == typ && strings.Contains(fmt.Sprint(ev), member) {
				got++
			}
		}
		if got >= n {
			return
		}
	}
	t.Fatalf("the app reported %s for %s %d time(s), want %d; timeline %v", typ, member, got, n, timeline(t, e, id))
}

// The members walk of the reference cluster app (examples/cluster-app, the
// Slurm pattern) on real agents and the real Docker engine: its controller
// on one node, two workers added on a second node (a second agent), one
// killed (member_failed, container_exited) and recovered, the other removed
// (its container gone), then decommission leaves nothing of the instance on
// either node. The controller follows its workers with the instance's own
// identity and reports each change as a runtime event (member_added,
// member_failed, member_removed), and its roster page shows them.
func TestInstanceMembersDocker(t *testing.T) {
	t.Parallel()
	d := agenttest.RequireDocker(t)
	bin := buildGpuaas(t)
	images := map[string]v1.Image{"1.0.0": clusterAppImage(t)}
	s := servertest.Start(t, store.SQLite, func(c *config.Config) { c.NodeHeartbeatTTL = 6 * time.Second }, // agents beat every 2 s
		servertest.WithWorkloadsOnBridge()) // the controller calls the API
	e := setupInstanceEnv(t, s, "cluster", images, clusterManifest("cluster"), -1)
	_, dirA := e.withRealAgent(t, bin)
	dirB := filepath.Join(t.TempDir(), "agent-b")
	if err := os.MkdirAll(dirB, 0o700); err != nil {
		t.Fatal(err)
	}
	b := startNamedAgent(t, s, e.admin, bin, dirB, "node-b")
	allocB := e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 0, "sku": "cpu.0x", "node_id": b.nodeID}).Want(t, 201).String("id")

	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "cluster", "version": "1.0.0", "display_name": "cluster"}).Want(t, 202)
	id := cr.String("id")
	removeInstanceOnExit(t, d, id)
	if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("create: %s", op.Body)
	}
	members := e.path("/app-instances/" + id + "/members")
	add := e.bot.Do("POST", members, map[string]any{"role": "worker", "allocation_id": allocB, "count": 2}).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, add.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("add: %s", op.Body)
	}
	state := func(workload string) string {
		out, _ := d.Run("", "inspect", "--format", "{{.State.Status}} {{index .Config.Labels \"gpuaas.node_id\"}} {{index .Config.Labels \"gpuaas.member_id\"}}", workload)
		return strings.TrimSpace(out)
	}
	ms := memberByName(t, e, id)
	w1, w2 := ms["worker-1"], ms["worker-2"]
	for _, m := range []map[string]any{w1, w2} {
		if got, want := state(m["workload_name"].(string)), "running "+b.nodeID+" "+m["id"].(string); got != want {
			t.Fatalf("member %s's container: %q, want %q", m["name"], got, want)
		}
	}
	// The controller saw them join, and said so.
	appReported(t, e, id, "member_added", "worker-1", 1)
	appReported(t, e, id, "member_added", "worker-2", 1)

	// Killed: node-b reports it exited, the member fails; recover brings it back.
	d.Must("", "kill", w1["workload_name"].(string))
	if m := waitMember(t, e, id, "worker-1", "failed"); m["reason_code"] != "container_exited" {
		t.Fatalf("killed member: %v", m)
	}
	appReported(t, e, id, "member_failed", "worker-1", 1)
	rec := e.bot.Do("POST", members+"/"+w1["id"].(string)+"/recover", nil).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, rec.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("recover: %s", op.Body)
	}
	if got := state(w1["workload_name"].(string)); !strings.HasPrefix(got, "running ") {
		t.Fatalf("recovered member's container: %q", got)
	}
	appReported(t, e, id, "member_added", "worker-1", 2) // back in the roster

	// Removed: its container is gone, verified by node-b.
	rm := e.bot.Do("POST", members+"/"+w2["id"].(string)+"/remove", nil).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, rm.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("remove: %s", op.Body)
	}
	if out, _ := d.Run("", "ps", "-aq", "--filter", "name=^"+w2["workload_name"].(string)+"$"); strings.TrimSpace(out) != "" {
		t.Fatalf("the removed member's container is still there: %s", out)
	}
	if got := state(w1["workload_name"].(string)); !strings.HasPrefix(got, "running ") {
		t.Fatalf("removing worker-2 touched worker-1: %q", got)
	}
	appReported(t, e, id, "member_removed", "worker-2", 1)

	// The controller's roster page, on its node's host-local port.
	inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	var page struct {
		Role    string `json:"role"`
		Workers []struct{ Name, Status string }
	}
	if err := json.Unmarshal([]byte(httpGet(str(inst, "access.local_url"))), &page); err != nil || page.Role != "controller" ||
		len(page.Workers) != 2 || page.Workers[0].Name != "worker-1" || page.Workers[0].Status != "running" || page.Workers[1].Status != "removed" {
		t.Fatalf("the controller's roster at %s: %v %+v", str(inst, "access.local_url"), err, page)
	}

	dec := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("decommission: %s", op.Body)
	}
	requireTornDown(t, d, id, dirA)
	requireTornDown(t, d, id, dirB)
}
