package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// usageEvents are n token-usage events of instance id, with ids
// prefix-0, prefix-1, ….
func usageEvents(id, prefix string, n int) []byte {
	evs := make([]map[string]any, n)
	for i := range evs {
		evs[i] = map[string]any{"specversion": "1.0", "id": fmt.Sprintf("%s-%d", prefix, i), "source": "//llm/" + id, "type": "gpuaas.usage.v1",
			"time": time.Now().UTC().Format(time.RFC3339Nano), "data": map[string]any{"usage_unit": "tokens", "quantity": 10}}
	}
	b, _ := json.Marshal(evs)
	return b
}

// One instance's usage ingest is limited per instance, counted in events:
// past the burst the whole batch is refused with 429, Retry-After and
// nothing recorded; a batch larger than the burst is refused as such; a
// refusal spends nothing; another instance's budget is its own.
func TestUsageIngestRateLimit(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		e := newInstanceEnv(t, d, "llm", map[string]v1.Image{"1.0.0": nil}, meteredManifest("llm", "tokens"), 2, billingByHand,
			func(c *config.Config) { c.UsageEventRate, c.UsageEventBurst = 0.001, 5 }) // a burst, and no refill within the test
		e.node.serve(t, okResult)
		create := func(name string) (string, *servertest.Client) {
			cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "llm", "version": "1.0.0", "display_name": name}).Want(t, 202)
			if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
				t.Fatalf("create %s: %s", name, op.Body)
			}
			return cr.String("id"), workloadClient(t, e, cr.String("id"))
		}
		mine, wl := create("mine")
		other, otherWL := create("other")
		post := func(c *servertest.Client, id string, body []byte) *servertest.Response {
			return c.Do("POST", e.path("/app-instances/"+id+"/usage"), json.RawMessage(body), "Content-Type", billing.MediaTypeBatch)
		}
		records := func(id string) int {
			return len(e.bot.Do("GET", "/api/v1/billing/usage?app_instance_id="+id, nil).Want(t, 200).Items())
		}
		post(wl, mine, usageEvents(mine, "a", 3)).Want(t, 200)
		r := post(wl, mine, usageEvents(mine, "b", 3))
		if r.Status != 429 || r.Header.Get("Retry-After") == "" || r.ErrorCode() != "usage_rate_limited" ||
			!strings.Contains(str(r, "error.message"), "send it again in") {
			t.Fatalf("3 events past a burst of 5 with 2 left: %d Retry-After %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
		}
		if n := records(mine); n != 3 {
			t.Fatalf("a refused batch was recorded: %d records", n)
		}
		// The refused batch spent nothing: two more fit, then one is too
		// many, even a repeat of an event already recorded.
		post(wl, mine, usageEvents(mine, "c", 2)).Want(t, 200)
		if r := post(wl, mine, usageEvents(mine, "a", 1)); r.Status != 429 {
			t.Fatalf("a repeat past the limit: %d %s", r.Status, r.Body)
		}
		if r := post(otherWL, other, usageEvents(other, "d", 6)); r.Status != 400 || r.ErrorCode() != "usage_batch_too_large" {
			t.Fatalf("a batch larger than the burst: %d %s", r.Status, r.Body)
		}
		post(otherWL, other, usageEvents(other, "d", 5)).Want(t, 200)
		if n := records(other); n != 5 {
			t.Fatalf("another instance's budget: %d records", n)
		}
	})
}

// A 429 is "not now", not an answer: a reporter that sends the refused
// batch again with the same idempotency key once Retry-After has passed
// gets it recorded, not the stored refusal.
func TestRateLimitedAnswerIsNotKeptForTheIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newInstanceEnv(t, store.SQLite, "llm", map[string]v1.Image{"1.0.0": nil}, meteredManifest("llm", "tokens"), 2, billingByHand,
		func(c *config.Config) { c.UsageEventRate, c.UsageEventBurst = 20, 40 })
	e.node.serve(t, okResult)
	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "llm", "version": "1.0.0", "display_name": "keyed"}).Want(t, 202)
	if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("create: %s", op.Body)
	}
	id := cr.String("id")
	wl := workloadClient(t, e, id)
	post := func(body []byte, hdr ...string) *servertest.Response {
		return wl.Do("POST", e.path("/app-instances/"+id+"/usage"), json.RawMessage(body), append([]string{"Content-Type", billing.MediaTypeBatch}, hdr...)...)
	}
	post(usageEvents(id, "a", 40)).Want(t, 200)
	// 30 events need 1.5 s of refill: refused now, whatever the machine's pace.
	batch := usageEvents(id, "b", 30)
	r := post(batch, "X-Idempotency-Key", "report-7")
	if r.Status != 429 {
		t.Fatalf("a batch past the spent burst: %d %s", r.Status, r.Body)
	}
	wait, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || wait < 1 {
		t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	time.Sleep(time.Duration(wait)*time.Second + 200*time.Millisecond)
	again := post(batch, "X-Idempotency-Key", "report-7")
	if again.Status != 200 || again.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the same batch and key after Retry-After: %d replayed %q %s", again.Status, again.Header.Get("Idempotent-Replayed"), again.Body)
	}
}

// A node's heartbeats, task polls and task results are limited per node
// and endpoint, after the node is authenticated: past the burst the
// request is refused with 429 and Retry-After and nothing is recorded
// (the heartbeat time stays), another endpoint of the same node and
// another node keep their own budgets.
func TestNodeRequestRateLimit(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d, func(c *config.Config) { c.NodeRequestRate, c.NodeRequestBurst = 0.001, 3 })
		admin := s.Admin()
		a := joinSimNode(t, s, admin, "node-a", 1) // spends one heartbeat
		b := joinSimNode(t, s, admin, "node-b", 1)
		beat := func(n *simNode) *servertest.Response {
			return n.c.Do("POST", "/api/v1/nodes/"+n.id+"/heartbeat", nodeapi.Heartbeat{Workloads: []nodeapi.Workload{}})
		}
		beat(a).Want(t, 200)
		beat(a).Want(t, 200)
		last := admin.Do("GET", "/api/v1/admin/nodes/"+a.id, nil).Want(t, 200).String("last_heartbeat_at")
		wantLimited := func(r *servertest.Response, what string) {
			t.Helper()
			if r.Status != 429 || r.Header.Get("Retry-After") == "" || r.ErrorCode() != "node_requests_rate_limited" {
				t.Fatalf("%s past the burst: %d Retry-After %q %s", what, r.Status, r.Header.Get("Retry-After"), r.Body)
			}
		}
		wantLimited(beat(a), "a heartbeat")
		if got := admin.Do("GET", "/api/v1/admin/nodes/"+a.id, nil).Want(t, 200).String("last_heartbeat_at"); got != last {
			t.Fatalf("a refused heartbeat was recorded: last heartbeat %s, was %s", got, last)
		}
		// The node's other endpoints have budgets of their own.
		poll := func() *servertest.Response { return a.c.Do("GET", "/api/v1/nodes/"+a.id+"/tasks?wait_seconds=0", nil) }
		result := func() *servertest.Response {
			return a.c.Do("POST", "/api/v1/nodes/"+a.id+"/tasks/"+uuid.NewString()+"/result", nodeapi.TaskResult{State: nodeapi.ResultSucceeded})
		}
		for range 3 {
			poll().Want(t, 200)
			result().Want(t, 404) // no such task, but the node asked
		}
		wantLimited(poll(), "a task poll")
		wantLimited(result(), "a task result")
		// Another node is unaffected; and a node cannot spend another's
		// budget (it is refused as not found before any is taken).
		beat(b).Want(t, 200)
		a.c.Do("POST", "/api/v1/nodes/"+b.id+"/heartbeat", nodeapi.Heartbeat{Workloads: []nodeapi.Workload{}}).Want(t, 404)
		beat(b).Want(t, 200)
	})
}
