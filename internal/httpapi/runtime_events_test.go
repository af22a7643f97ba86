package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// jsonAt reads the value at a dotted path of a JSON answer (nil when
// absent); a number indexes a list.
func jsonAt(r *servertest.Response, path string) any {
	var v any = r.JSON
	for _, k := range strings.Split(path, ".") {
		if list, ok := v.([]any); ok {
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(list) {
				return nil
			}
			v = list[i]
			continue
		}
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// str reads a string at a dotted path of a JSON answer.
func str(r *servertest.Response, path string) string {
	s, _ := jsonAt(r, path).(string)
	return s
}

// num reads a number at a dotted path of a JSON answer.
func num(r *servertest.Response, path string) int {
	f, _ := jsonAt(r, path).(float64)
	return int(f)
}

// withRuntimeProfile changes the runtime profile of an echo manifest.
func withRuntimeProfile(base func(version, imageRef string) map[string]any, change func(p map[string]any)) func(version, imageRef string) map[string]any {
	return func(version, imageRef string) map[string]any {
		m := base(version, imageRef)
		change(m["runtime_profile"].(map[string]any))
		return m
	}
}

// steadyNodes keeps simulated nodes ready while a test moves the server's
// clock by minutes: their beats come on the wall clock.
func steadyNodes(c *config.Config) { c.NodeHeartbeatTTL = 10 * time.Minute }

// runtimeEvent is one CloudEvent a workload posts about itself.
func runtimeEvent(id, typ string, at time.Time, data map[string]any) map[string]any {
	ev := map[string]any{"specversion": "1.0", "id": id, "source": "//echo/worker", "type": typ, "time": at.UTC().Format(time.RFC3339Nano)}
	if data != nil {
		ev["data"] = data
	}
	return ev
}

func postRuntime(c *servertest.Client, e *instanceEnv, id string, events ...map[string]any) *servertest.Response {
	return c.Do("POST", e.path("/app-instances/"+id+"/runtime-events"), events, "Content-Type", "application/cloudevents-batch+json")
}

// A workload reports heartbeats, health and member changes with its own
// identity only; repeats are recognised; a late heartbeat degrades the
// instance with an event, and the next one makes it healthy again. Time
// moves on the server's clock, not by sleeping.
func TestRuntimeEvents(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		testRuntimeEvents(t, d)
	})
}

func testRuntimeEvents(t *testing.T, d store.Dialect) {
	clk := clock.NewManual(time.Now().UTC().Truncate(time.Second)) // near the wall clock the test clients sign with
	manifest := withRuntimeProfile(echoManifest("echo"), func(p map[string]any) {
		p["health"] = map[string]any{"heartbeat_timeout_seconds": 30}
	})
	e := newInstanceEnv(t, d, "echo", map[string]v1.Image{"1.0.0": nil}, manifest, 2, servertest.WithClock(clk), steadyNodes)
	e.node.serve(t, okResult)
	create := func(name string) string {
		cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": name}).Want(t, 202)
		if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("create %s: %s", name, op.Body)
		}
		return cr.String("id")
	}
	mine, other := create("mine"), create("other")
	inst := e.bot.Do("GET", e.path("/app-instances/"+mine), nil).Want(t, 200)
	if str(inst, "health.state") != "unknown" || num(inst, "health.heartbeat_timeout_seconds") != 30 || str(inst, "health.heartbeat_due_at") == "" {
		t.Fatalf("a fresh instance's health: %s", inst.Body)
	}
	identity, otherIdentity := workloadClient(t, e, mine), workloadClient(t, e, other)
	now := clk.Now

	// Who may report: the instance's own identity, for itself only.
	beat := runtimeEvent("b1", "heartbeat", now(), nil)
	for who, c := range map[string]*servertest.Client{"a platform admin": e.admin, "the project's operator account": e.bot} {
		if r := postRuntime(c, e, mine, beat); r.Status != 403 {
			t.Fatalf("%s reported for the instance: %d %s", who, r.Status, r.Body)
		}
	}
	// To an instance identity, another instance does not exist (as GET).
	if r := postRuntime(otherIdentity, e, mine, beat); r.Status != 404 {
		t.Fatalf("another instance's identity reported for the instance: %d %s", r.Status, r.Body)
	}
	if r := postRuntime(identity, e, other, beat); r.Status != 404 {
		t.Fatalf("an identity reported for another instance: %d %s", r.Status, r.Body)
	}
	if h := e.bot.Do("GET", e.path("/app-instances/"+mine), nil).Want(t, 200); str(h, "health.last_heartbeat_at") != "" {
		t.Fatalf("a refused heartbeat counted: %s", h.Body)
	}

	// A heartbeat: alive, healthy, next one due a timeout later.
	r := postRuntime(identity, e, mine, beat).Want(t, 200)
	if num(r, "applied") != 1 || r.String("health") != "healthy" {
		t.Fatalf("heartbeat: %s", r.Body)
	}
	inst = e.bot.Do("GET", e.path("/app-instances/"+mine), nil).Want(t, 200)
	if str(inst, "health.state") != "healthy" || str(inst, "health.last_heartbeat_at") == "" {
		t.Fatalf("after a heartbeat: %s", inst.Body)
	}

	// Member changes land on the timeline once.
	added := runtimeEvent("m1", "member_added", now(), map[string]any{"member": "worker-1", "role": "worker"})
	failed := runtimeEvent("m2", "member_failed", now(), map[string]any{"member": "worker-1", "role": "worker", "reason": "gpu_xid_error", "message": "Xid 79 on GPU 0"})
	if r := postRuntime(identity, e, mine, added, failed).Want(t, 200); num(r, "recorded") != 2 || num(r, "duplicates") != 0 {
		t.Fatalf("member events: %s", r.Body)
	}
	if r := postRuntime(identity, e, mine, failed).Want(t, 200); num(r, "recorded") != 0 || num(r, "duplicates") != 1 {
		t.Fatalf("a repeated event: %s", r.Body)
	}
	// Another instance that posts the same source and ids has events of
	// its own, not duplicates of this one's; its repeats are duplicates.
	if r := postRuntime(otherIdentity, e, other, added, failed).Want(t, 200); num(r, "recorded") != 2 || num(r, "duplicates") != 0 {
		t.Fatalf("another instance's events with this one's source and ids: %s", r.Body)
	}
	if r := postRuntime(otherIdentity, e, other, failed, added).Want(t, 200); num(r, "recorded") != 0 || num(r, "duplicates") != 2 {
		t.Fatalf("the other instance's repeated events: %s", r.Body)
	}
	if o := e.bot.Do("GET", e.path("/app-instances/"+other+"/events?limit=500"), nil).Want(t, 200); !strings.Contains(string(o.Body), "gpu_xid_error") {
		t.Fatalf("the other instance's timeline lacks its member_failed: %s", o.Body)
	}
	count := func(typ string) int { // over the whole timeline, page by page
		n, cursor := 0, ""
		for {
			page := e.bot.Do("GET", e.path("/app-instances/"+mine+"/events?limit=500&cursor="+cursor), nil).Want(t, 200)
			for _, ev := range page.Items() {
				if ev["event_type"] == typ {
					n++
				}
			}
			if cursor = page.String("next_cursor"); cursor == "" {
				return n
			}
		}
	}
	if count("member_added") != 1 || count("member_failed") != 1 || count("heartbeat") != 0 {
		t.Fatalf("timeline: member_added %d, member_failed %d, heartbeat %d", count("member_added"), count("member_failed"), count("heartbeat"))
	}
	// busEvents lists the events of typ once at least want of them match
	// (events are listed once the relay sequenced them).
	busEvents := func(typ string, want int, match func(data map[string]any) bool) []map[string]any {
		var got []map[string]any
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			got = nil
			for _, ev := range e.admin.Do("GET", e.path("/events?limit=200&type="+typ), nil).Want(t, 200).Items() {
				if data, _ := ev["data"].(map[string]any); data["app_instance_id"] == mine && match(data) {
					got = append(got, ev)
				}
			}
			if len(got) >= want {
				break
			}
		}
		return got
	}
	reported := busEvents("apps.instance.runtime_reported", 1, func(map[string]any) bool { return true })
	if len(reported) != 1 || !strings.Contains(fmt.Sprint(reported[0]["data"]), "gpu_xid_error") {
		t.Fatalf("runtime_reported events: %v", reported)
	}

	// A full batch of the largest events: every one recorded, announced in
	// events small enough for the bus.
	var big []map[string]any
	for n := range instances.MaxRuntimeBatch {
		ev := runtimeEvent(fmt.Sprintf("big-%d", n), "member_removed", now(), map[string]any{"member": strings.Repeat("w", 128),
			"message": strings.Repeat("m", 1024), "reason": "scaled_down"})
		ev["source"] = "//" + strings.Repeat("s", 1000)
		big = append(big, ev)
	}
	if r := postRuntime(identity, e, mine, big...).Want(t, 200); num(r, "recorded") != instances.MaxRuntimeBatch {
		t.Fatalf("a full batch recorded %d", num(r, "recorded"))
	}
	if n := len(busEvents("apps.instance.runtime_reported", 17, func(map[string]any) bool { return true })); n != 17 { // 1 + ⌈1000/64⌉
		t.Fatalf("%d runtime_reported events, want 17", n)
	}

	// Refused whole, with the field to fix.
	bad := []struct {
		ev    map[string]any
		code  int
		field string
	}{
		{runtimeEvent("x1", "bogus", now(), nil), 400, "/0/type"},
		{runtimeEvent("x2", "member_failed", now(), map[string]any{"reason": "oom"}), 400, "/0/data/member"},
		{runtimeEvent("x3", "healthy", now(), map[string]any{"reason": "Not A Code"}), 400, "/0/data/reason"},
		{runtimeEvent("x4", "heartbeat", now().Add(time.Hour), nil), 400, "/time"},
	}
	for _, b := range bad {
		r := postRuntime(identity, e, mine, b.ev)
		if r.Status != b.code || !strings.Contains(string(r.Body), b.field) {
			t.Errorf("%v: %d %s, want %d naming %s", b.ev, r.Status, r.Body, b.code, b.field)
		}
	}
	wrong := runtimeEvent("x5", "healthy", now(), nil)
	wrong["subject"] = other
	if r := postRuntime(identity, e, mine, wrong); r.Status != 422 {
		t.Fatalf("an event about another instance: %d %s", r.Status, r.Body)
	}

	// The heartbeat is late: degraded, with an event; the next one heals.
	ctx := context.Background()
	if err := e.s.App.Instances.SweepHeartbeats(ctx); err != nil {
		t.Fatal(err)
	}
	if h := e.bot.Do("GET", e.path("/app-instances/"+mine), nil).Want(t, 200); str(h, "health.state") != "healthy" {
		t.Fatalf("degraded before the timeout: %s", h.Body)
	}
	clk.Advance(31 * time.Second)
	if err := e.s.App.Instances.SweepHeartbeats(ctx); err != nil {
		t.Fatal(err)
	}
	inst = e.bot.Do("GET", e.path("/app-instances/"+mine), nil).Want(t, 200)
	if str(inst, "health.state") != "degraded" || str(inst, "health.reason") != "heartbeat_missed" || inst.String("status") != "running" {
		t.Fatalf("after a missed heartbeat: %s", inst.Body)
	}
	if h := e.bot.Do("GET", e.path("/app-instances/"+other), nil).Want(t, 200); str(h, "health.state") != "degraded" {
		t.Fatalf("the instance that never beat: %s", h.Body)
	}
	degraded := busEvents("apps.instance.health_changed", 1, func(data map[string]any) bool {
		h, _ := data["health"].(map[string]any)
		return h["to"] == "degraded" && h["from"] == "healthy" && h["reason"] == "heartbeat_missed"
	})
	if len(degraded) != 1 {
		t.Fatalf("health_changed events to degraded: %v", degraded)
	}
	r = postRuntime(identity, e, mine, runtimeEvent("b2", "heartbeat", now(), nil)).Want(t, 200)
	if r.String("health") != "healthy" {
		t.Fatalf("heartbeat after degrading: %s", r.Body)
	}
	if inst := e.bot.Do("GET", e.path("/app-instances/"+mine), nil).Want(t, 200); str(inst, "health.reason") != "heartbeat_resumed" {
		t.Fatalf("after the heartbeat resumed: %s", inst.Body)
	}
	if count("apps.instance.health_changed") != 3 { // unknown→healthy, healthy→degraded, degraded→healthy
		t.Fatalf("health changes on the timeline: %d", count("apps.instance.health_changed"))
	}

	// An unhealthy statement holds through plain heartbeats.
	postRuntime(identity, e, mine, runtimeEvent("h1", "unhealthy", now(), map[string]any{"reason": "model_not_loaded"})).Want(t, 200)
	if r := postRuntime(identity, e, mine, runtimeEvent("b3", "heartbeat", now(), nil)).Want(t, 200); r.String("health") != "unhealthy" {
		t.Fatalf("a heartbeat overrode the app's unhealthy: %s", r.Body)
	}

	// Once decommissioned, the instance takes no more reports.
	dr := e.bot.Do("POST", e.path("/app-instances/"+mine+"/decommission"), nil).Want(t, 202)
	waitOp(t, e.bot, e.pid, dr.String("operation_id"))
	if r := postRuntime(identity, e, mine, runtimeEvent("b4", "heartbeat", now(), nil)); r.Status < 400 {
		t.Fatalf("a decommissioned instance took a heartbeat: %d %s", r.Status, r.Body)
	}
}

// A version whose readiness is start_completed runs once its workload says
// it started, not when the node started it; one that never says so fails
// with readiness_timeout once the readiness budget passed.
func TestStartCompletedReadiness(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		testStartCompletedReadiness(t, d)
	})
}

func testStartCompletedReadiness(t *testing.T, d store.Dialect) {
	clk := clock.NewManual(time.Now().UTC().Truncate(time.Second)) // near the wall clock the test clients sign with
	manifest := withRuntimeProfile(echoManifest("ctl"), func(p map[string]any) {
		p["readiness"] = map[string]any{"type": "start_completed", "period_seconds": 5, "failure_threshold": 6}
	})
	e := newInstanceEnv(t, d, "ctl", map[string]v1.Image{"1.0.0": nil}, manifest, 2, servertest.WithClock(clk), steadyNodes)
	e.node.serve(t, okResult)
	launch := func(name string) (string, string) {
		cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "ctl", "version": "1.0.0", "display_name": name}).Want(t, 202)
		return cr.String("id"), cr.String("operation_id")
	}
	awaiting := func(opID string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		var op *servertest.Response
		for time.Now().Before(deadline) {
			op = e.bot.Do("GET", e.path("/operations/"+opID), nil).Want(t, 200)
			if op.String("state") != "in_progress" {
				t.Fatalf("the operation ended without start_completed: %s", op.Body)
			}
			if strings.Contains(op.String("description"), "start_completed") {
				return
			}
			time.Sleep(20 * time.Millisecond) // polling an async API, as a client would
		}
		t.Fatalf("operation %s never waited for start_completed: %s\n%s", opID, op.Body, e.s.LogText())
	}

	id, opID := launch("starts")
	awaiting(opID)
	if inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200); inst.String("status") != "deploying" {
		t.Fatalf("running before the workload said it started: %s", inst.Body)
	}
	identity := workloadClient(t, e, id)
	postRuntime(identity, e, id, runtimeEvent("s1", "start_completed", clk.Now(), map[string]any{"message": "3 workers joined"})).Want(t, 200)
	if op := waitOp(t, e.bot, e.pid, opID); op.String("state") != "succeeded" {
		t.Fatalf("after start_completed: %s", op.Body)
	}
	var order []string
	for _, ev := range e.bot.Do("GET", e.path("/app-instances/"+id+"/events?limit=100"), nil).Want(t, 200).Items() {
		order = append(order, ev["event_type"].(string))
	}
	if got := strings.Join(order, ","); !strings.Contains(got, "apps.instance.deploying,start_completed,apps.instance.running") {
		t.Fatalf("timeline: %s", got)
	}

	silent, silentOp := launch("silent")
	awaiting(silentOp)
	clk.Advance(29 * time.Second)
	driver := e.s.App.Instances.Worker()
	runs := driver.Runs()
	driver.Kick()
	if err := driver.WaitRuns(context.Background(), runs+1); err != nil { // a whole pass ran: it must not fail the operation early
		t.Fatal(err)
	}
	if op := e.bot.Do("GET", e.path("/operations/"+silentOp), nil).Want(t, 200); op.String("state") != "in_progress" {
		t.Fatalf("failed before the readiness budget passed: %s", op.Body)
	}
	clk.Advance(2 * time.Second)
	e.s.App.Instances.Worker().Kick()
	op := waitOp(t, e.bot, e.pid, silentOp)
	if op.String("state") != "failed" || op.String("reason_code") != "readiness_timeout" {
		t.Fatalf("a workload that never said it started: %s", op.Body)
	}
	if inst := e.bot.Do("GET", e.path("/app-instances/"+silent), nil).Want(t, 200); inst.String("status") != "failed" || inst.String("reason_code") != "readiness_timeout" {
		t.Fatalf("instance: %s", inst.Body)
	}
}

// BenchmarkRuntimeEvents: a workload's runtime events through the real API
// (token check, parse, the instance's row lock, one timeline row per event
// with its durable dedupe key, one outbox event and one audit row per post,
// committed before the answer): batches of 1,000 member events, and
// heartbeat-only posts (liveness: no timeline row). Run with:
//
//	GPUAAS_TEST_DATABASE_URL=postgres://… go test -run '^$' -bench BenchmarkRuntimeEvents -benchtime 20000x ./internal/httpapi/
func BenchmarkRuntimeEvents(b *testing.B) {
	storetest.EachDialect(b, func(b *testing.B, d store.Dialect) {
		// Unlimited: this measures what the server can take, not the limit.
		e := newInstanceEnv(b, d, "echo", map[string]v1.Image{"1.0.0": nil}, echoManifest("echo"), 2, func(c *config.Config) { c.RuntimeEventRate = 0 })
		e.node.serve(b, okResult)
		cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "bench"}).Want(b, 202)
		id := cr.String("id")
		for deadline := time.Now().Add(time.Minute); e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(b, 200).String("status") != "running"; {
			if time.Now().After(deadline) {
				b.Fatal("the instance never ran")
			}
			time.Sleep(20 * time.Millisecond) // polling an async API, as a client would
		}
		token := workloadClient(b, e, id).Token
		hc := &http.Client{}
		url := e.s.URL + e.path("/app-instances/"+id+"/runtime-events")
		seq := 0
		body := func(n int, typ string) []byte {
			out := []byte{'['}
			for i := range n {
				if i > 0 {
					out = append(out, ',')
				}
				seq++
				out = fmt.Appendf(out, `{"specversion":"1.0","id":"ev-%d","source":"//bench","type":%q`, seq, typ)
				if typ != "heartbeat" {
					out = fmt.Appendf(out, `,"data":{"member":"worker-%d","role":"worker"}`, seq%64)
				}
				out = append(out, '}')
			}
			return append(out, ']')
		}
		b.Run("batch1000", func(b *testing.B) {
			for done := 0; done < b.N; done += 1000 {
				var rep struct{ Recorded int }
				if err := json.Unmarshal(rawDo(b, hc, "POST", url, token, body(1000, "member_added")), &rep); err != nil || rep.Recorded != 1000 {
					b.Fatalf("recorded %d of 1000: %v", rep.Recorded, err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
		b.Run("heartbeat", func(b *testing.B) {
			for range b.N {
				rawDo(b, hc, "POST", url, token, body(1, "heartbeat"))
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "posts/s")
		})
	})
}

// runtimeInstance starts a server (with opts), runs one echo instance on
// it and returns the env, the instance and a client with its identity.
func runtimeInstance(t *testing.T, d store.Dialect, name string, opts ...servertest.Option) (*instanceEnv, func(name string) (string, *servertest.Client)) {
	t.Helper()
	e := newInstanceEnv(t, d, "echo", map[string]v1.Image{"1.0.0": nil}, echoManifest("echo"), 2, opts...)
	e.node.serve(t, okResult)
	return e, func(name string) (string, *servertest.Client) {
		cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": name}).Want(t, 202)
		if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("create %s: %s", name, op.Body)
		}
		return cr.String("id"), workloadClient(t, e, cr.String("id"))
	}
}

// timelineIDs lists the ids of the runtime events on an instance's
// timeline, and how many of its rows the platform wrote itself.
func timelineIDs(t *testing.T, e *instanceEnv, id string) (reported []string, lifecycle int) {
	t.Helper()
	for cursor := ""; ; {
		page := e.bot.Do("GET", e.path("/app-instances/"+id+"/events?limit=500&cursor="+cursor), nil).Want(t, 200)
		for _, ev := range page.Items() {
			p, _ := ev["payload"].(map[string]any)
			if src, _ := p["source"].(string); src == "//echo/worker" {
				reported = append(reported, p["id"].(string))
			} else {
				lifecycle++
			}
		}
		if cursor = page.String("next_cursor"); cursor == "" {
			return reported, lifecycle
		}
	}
}

// memberEvents are n member_added events with ids prefix-0, prefix-1, ….
func memberEvents(prefix string, n int) []map[string]any {
	evs := make([]map[string]any, n)
	for i := range evs {
		evs[i] = runtimeEvent(fmt.Sprintf("%s-%d", prefix, i), "member_added", time.Now(), map[string]any{"member": fmt.Sprintf("w%d", i)})
	}
	return evs
}

// One instance's runtime events are limited per instance, counted in
// events (heartbeats too): past the burst the whole post is refused with
// 429, Retry-After and nothing written; a batch larger than the burst is
// refused as such; another instance's budget is its own.
func TestRuntimeEventRateLimit(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		e, create := runtimeInstance(t, d, "limited", func(c *config.Config) {
			c.RuntimeEventRate, c.RuntimeEventBurst = 0.001, 5 // a burst, and no refill within the test
		})
		mine, identity := create("mine")
		other, otherIdentity := create("other")
		if r := postRuntime(identity, e, mine, memberEvents("a", 3)...).Want(t, 200); num(r, "recorded") != 3 {
			t.Fatalf("within the burst: %s", r.Body)
		}
		r := postRuntime(identity, e, mine, memberEvents("b", 3)...)
		if r.Status != 429 || r.Header.Get("Retry-After") == "" || str(r, "error.code") != "runtime_events_rate_limited" ||
			!strings.Contains(str(r, "error.message"), "retry it in") {
			t.Fatalf("3 events past a burst of 5 with 2 left: %d Retry-After %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
		}
		if got, _ := timelineIDs(t, e, mine); len(got) != 3 {
			t.Fatalf("a refused batch was written: timeline %v", got)
		}
		// The refused post spent nothing: two more fit, then a heartbeat
		// is one event too many.
		postRuntime(identity, e, mine, memberEvents("c", 2)...).Want(t, 200)
		if r := postRuntime(identity, e, mine, runtimeEvent("hb", "heartbeat", time.Now(), nil)); r.Status != 429 {
			t.Fatalf("a heartbeat past the limit: %d %s", r.Status, r.Body)
		}
		if r := postRuntime(otherIdentity, e, other, memberEvents("d", 6)...); r.Status != 400 || str(r, "error.code") != "runtime_event_batch_too_large" {
			t.Fatalf("a batch larger than the burst: %d %s", r.Status, r.Body)
		}
		if r := postRuntime(otherIdentity, e, other, memberEvents("d", 5)...).Want(t, 200); num(r, "recorded") != 5 {
			t.Fatalf("another instance's budget: %s", r.Body)
		}
	})
}

// An instance keeps its newest --runtime-event-retention runtime-reported
// rows: a pass deletes the oldest past the cap, never the platform's own
// rows, leaves an audit row, and leaves an instance under the cap alone.
func TestRuntimeEventRetention(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		e, create := runtimeInstance(t, d, "kept", func(c *config.Config) { c.RuntimeEventRetention = 4 })
		mine, identity := create("mine")
		small, smallIdentity := create("small")
		_, lifecycle := timelineIDs(t, e, mine)
		postRuntime(identity, e, mine, memberEvents("r", 3)...).Want(t, 200)
		postRuntime(identity, e, mine, memberEvents("s", 3)...).Want(t, 200)
		postRuntime(smallIdentity, e, small, memberEvents("r", 2)...).Want(t, 200)
		n, err := e.s.App.Instances.PruneRuntimeEvents(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got, left := timelineIDs(t, e, mine)
		if n != 2 || strings.Join(got, " ") != "r-2 s-0 s-1 s-2" || left < lifecycle {
			t.Fatalf("after a pass (deleted %d): runtime rows %v, lifecycle rows %d of %d", n, got, left, lifecycle)
		}
		if got, _ := timelineIDs(t, e, small); len(got) != 2 {
			t.Fatalf("an instance under the cap lost rows: %v", got)
		}
		audit := e.admin.Do("GET", "/api/v1/audit-events?action=app_instance.runtime_events_pruned&limit=10", nil).Want(t, 200).Items()
		if len(audit) != 1 || audit[0]["resource_id"] != mine {
			t.Fatalf("audit rows of the pass: %v", audit)
		}
		if n, err := e.s.App.Instances.PruneRuntimeEvents(context.Background()); n != 0 || err != nil {
			t.Fatalf("a second pass deleted %d: %v", n, err)
		}
		// The server's own worker: after a pass over every instance it
		// looks only at those that reported since, and small, which now
		// goes past the cap, is one of them.
		w := e.s.App.Instances.RetentionWorker()
		pass := func() {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			n := w.Runs()
			w.Kick()
			if err := w.WaitRuns(ctx, n+1); err != nil {
				t.Fatal(err)
			}
		}
		pass()
		postRuntime(smallIdentity, e, small, memberEvents("t", 3)...).Want(t, 200)
		pass()
		if got, _ := timelineIDs(t, e, small); strings.Join(got, " ") != "r-1 t-0 t-1 t-2" {
			t.Fatalf("the worker's pass after small reported past the cap: runtime rows %v", got)
		}
	})
}

// A control plane back from an outage finds every heartbeat as overdue as
// the outage is long. Its sweep judges an instance only once it has
// listened for that instance's whole timeout: one whose workload beats
// meanwhile stays healthy, and one that stays silent degrades after.
func TestHeartbeatSweepWaitsAfterAnOutage(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		clk := clock.NewManual(time.Now().UTC().Truncate(time.Second))
		manifest := withRuntimeProfile(echoManifest("echo"), func(p map[string]any) {
			p["health"] = map[string]any{"heartbeat_timeout_seconds": 30}
		})
		e := newInstanceEnv(t, d, "echo", map[string]v1.Image{"1.0.0": nil}, manifest, 2, servertest.WithClock(clk), steadyNodes)
		e.node.serve(t, okResult)
		ids, clients := map[string]string{}, map[string]*servertest.Client{}
		for _, name := range []string{"back", "silent"} {
			cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": name}).Want(t, 202)
			if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
				t.Fatalf("create %s: %s", name, op.Body)
			}
			ids[name] = cr.String("id")
			clients[name] = workloadClient(t, e, ids[name])
			postRuntime(clients[name], e, ids[name], runtimeEvent(name+"-1", "heartbeat", clk.Now(), nil)).Want(t, 200)
		}
		health := func(name string) string {
			return str(e.bot.Do("GET", e.path("/app-instances/"+ids[name]), nil).Want(t, 200), "health.state")
		}
		// The control plane stops (this server's sweep with it) and comes
		// back two minutes later, every heartbeat overdue.
		e.s.App.Instances.HeartbeatWorker().Stop()
		clk.Advance(2 * time.Minute)
		restarted := instances.New(instances.Deps{Store: store.Instances(e.s.DB), IAM: e.s.App.IAM, Now: clk.Now})
		ctx := context.Background()
		if err := restarted.SweepHeartbeats(ctx); err != nil {
			t.Fatal(err)
		}
		if health("back") != "healthy" || health("silent") != "healthy" {
			t.Fatalf("the first sweep after an outage degraded instances: back %s, silent %s", health("back"), health("silent"))
		}
		// back's workload beats again within its timeout of the return.
		clk.Advance(20 * time.Second)
		postRuntime(clients["back"], e, ids["back"], runtimeEvent("back-2", "heartbeat", clk.Now(), nil)).Want(t, 200)
		clk.Advance(11 * time.Second)
		if err := restarted.SweepHeartbeats(ctx); err != nil {
			t.Fatal(err)
		}
		if health("silent") != "degraded" || health("back") != "healthy" {
			t.Fatalf("a timeout after the control plane came back: silent %s (want degraded), back %s (want healthy)", health("silent"), health("back"))
		}
		// The server's own sweep, stopped above as the schema guard stops
		// every job while it refuses the workloads' posts, starts again two
		// minutes on: its first run waits as after an outage.
		clk.Advance(2 * time.Minute)
		w := e.s.App.Instances.HeartbeatWorker()
		runs := w.Runs()
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := w.WaitRuns(waitCtx, runs+1); err != nil {
			t.Fatal(err)
		}
		if health("back") != "healthy" {
			t.Fatalf("the first sweep after the worker was paused and resumed degraded back: %s", health("back"))
		}
	})
}
