package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/runtime"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// meteredManifest is echoManifest declaring metering.kind.
func meteredManifest(slug, kind string) func(version, imageRef string) map[string]any {
	base := echoManifest(slug)
	return func(version, imageRef string) map[string]any {
		m := base(version, imageRef)
		m["metering"] = map[string]any{"kind": kind}
		return m
	}
}

// billingByHand leaves metering and rating to the test's explicit calls.
func billingByHand(c *config.Config) { c.BillingMeterInterval = time.Hour }

// TestBillingOverRealInstances drives real app instances (the instances
// API, the node task queue, a simulated node) on a real allocation, and
// bills them.
func TestBillingOverRealInstances(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d)+"/session_and_gpu_seconds", func(t *testing.T) {
			t.Parallel()
			testBillingSession(t, d)
		})
		t.Run(string(d)+"/workload_identity", func(t *testing.T) {
			t.Parallel()
			testBillingIdentity(t, d)
		})
	}
}

// An instance runs for a measured interval: its session seconds and its
// allocation's GPU-seconds appear in /billing/usage with every attribution
// field, and rate into ledger entries whose sum is price × quantity. An
// instance launch at the spend budget is refused before anything is
// recorded; within budget it succeeds.
func testBillingSession(t *testing.T, d store.Dialect) {
	ctx := context.Background()
	// The server's clock moves only when the test moves it.
	clk := clock.NewManual(time.Now())
	e := newInstanceEnv(t, d, "lab", map[string]v1.Image{"1.0.0": nil}, meteredManifest("lab", "session_seconds"), 1, billingByHand, servertest.WithClock(clk))
	e.node.serve(t, okResult)
	e.admin.Do("POST", "/api/v1/admin/billing/prices", map[string]any{"usage_source": "allocation", "sku": "test.1x",
		"unit_price_micros": 3_600_000, "effective_from": "2020-01-01T00:00:00Z"}).Want(t, 201) // 1000 micros per GPU-second
	e.admin.Do("POST", "/api/v1/admin/billing/prices", map[string]any{"usage_source": "app_runtime", "meter": "lab/session_seconds",
		"unit_price_micros": 500, "effective_from": "2020-01-01T00:00:00Z"}).Want(t, 201)

	create := map[string]any{"app_slug": "lab", "version": "1.0.0", "display_name": "lab-1", "operating_mode": "tenant_dedicated",
		"control_plane_scope": "project", "config": map[string]any{}}
	cr := e.bot.Do("POST", e.path("/app-instances"), create).Want(t, 202)
	id := cr.String("id")
	if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("create: %s", op.Body)
	}
	// The measured interval: two seconds of the server's clock.
	const ran = 2
	clk.Advance(ran * time.Second)
	dec := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
	waitOp(t, e.bot, e.pid, dec.String("operation_id"))
	e.admin.Do("POST", "/api/v1/admin/allocations/"+e.alloc+"/release", nil).Want(t, 200)

	svc := e.s.App.Billing()
	if _, err := svc.Meter(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := svc.Rate(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The expected quantities, from the platform's own records.
	q := e.s.DB.Queries()
	evs, _, err := q.ListInstanceEvents(ctx, id, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var ranFrom, ranTo time.Time
	for _, ev := range evs {
		switch {
		case ev.Status == "running" && ranFrom.IsZero():
			ranFrom = ev.OccurredAt
		case ev.Status == "decommissioning" && ranTo.IsZero():
			ranTo = ev.OccurredAt
		}
	}
	sessSecs := int64(ranTo.Truncate(time.Second).Sub(ranFrom.Truncate(time.Second)) / time.Second)
	ivs, err := q.AllocationIntervals(ctx, e.pid, time.Time{}, clk.Now().Add(time.Hour))
	if err != nil || len(ivs) != 1 {
		t.Fatalf("allocation intervals %v %v", ivs, err)
	}
	gpuSecs := int64(ivs[0].EndedAt.Truncate(time.Second).Sub(ivs[0].StartedAt.Truncate(time.Second)) / time.Second)
	if sessSecs != ran || gpuSecs < sessSecs {
		t.Fatalf("measured %d session seconds inside %d allocation seconds", sessSecs, gpuSecs)
	}

	inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	u := e.bot.Do("GET", "/api/v1/billing/usage?app_instance_id="+id+"&usage_source=app_runtime", nil).Want(t, 200).Items()
	if len(u) != 1 {
		t.Fatalf("session usage: %v", u)
	}
	for _, k := range []string{"org_id", "project_id", "app_slug", "operating_mode", "control_plane_scope", "runtime_backend"} {
		if u[0][k] == "" || u[0][k] != inst.JSON[k] {
			t.Errorf("session record %s = %v, instance says %v", k, u[0][k], inst.JSON[k])
		}
	}
	if u[0]["app_instance_id"] != id || u[0]["usage_unit"] != "session_seconds" || u[0]["quantity"] != float64(sessSecs) || u[0]["correlation_id"] == "" {
		t.Errorf("session record %v, want %d session_seconds", u[0], sessSecs)
	}
	a := e.bot.Do("GET", "/api/v1/billing/usage?project_id="+e.pid+"&usage_source=allocation", nil).Want(t, 200).Items()
	if len(a) != 1 || a[0]["quantity"] != float64(gpuSecs) || a[0]["allocation_id"] != e.alloc || a[0]["sku"] != "test.1x" {
		t.Fatalf("allocation usage %v, want %d gpu_seconds", a, gpuSecs)
	}
	led := e.bot.Do("GET", "/api/v1/billing/ledger?project_id="+e.pid, nil).Want(t, 200)
	var sum int64
	for _, it := range led.Items() {
		sum += int64(it["amount_micros"].(float64))
	}
	if want := gpuSecs*1000 + sessSecs*500; sum != want || len(led.Items()) != 2 {
		t.Fatalf("ledger sums to %d, want %d: %s", sum, want, led.Body)
	}

	// At the spend budget: launches are refused and record nothing.
	alloc := e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 1, "sku": "test.1x"}).Want(t, 201).String("id")
	e.admin.Do("PUT", e.path("/billing/budget"), map[string]any{"spend_limit_micros": sum}).Want(t, 200)
	before := len(e.bot.Do("GET", e.path("/app-instances"), nil).Want(t, 200).Items())
	create["target_allocation_id"] = alloc
	r := e.bot.Do("POST", e.path("/app-instances"), create).Want(t, 409)
	if r.ErrorCode() != "budget_exceeded" || !strings.Contains(string(r.Body), "budget") {
		t.Fatalf("launch over budget: %s", r.Body)
	}
	if n := len(e.bot.Do("GET", e.path("/app-instances"), nil).Want(t, 200).Items()); n != before {
		t.Fatalf("a refused launch recorded an instance: %d → %d", before, n)
	}
	e.admin.Do("PUT", e.path("/billing/budget"), map[string]any{"spend_limit_micros": sum * 2}).Want(t, 200)
	e.bot.Do("POST", e.path("/app-instances"), create).Want(t, 202)
}

// The workload reports usage with the identity the platform gave it (the
// key file mounted into its container): the same event posted 100 times
// concurrently counts once; another instance's identity is refused.
func testBillingIdentity(t *testing.T, d store.Dialect) {
	e := newInstanceEnv(t, d, "llm", map[string]v1.Image{"1.0.0": nil}, meteredManifest("llm", "tokens"), 1, billingByHand)
	var mu sync.Mutex
	keys := map[string]client.KeyFile{}
	e.node.serve(t, func(task nodeapi.Task) nodeapi.TaskResult {
		if task.Kind == nodeapi.KindContainerRun {
			var run nodeapi.ContainerRun
			_ = json.Unmarshal(task.Payload, &run)
			for _, m := range run.Mounts {
				if m.Target == runtime.IdentityPath {
					var k client.KeyFile
					_ = json.Unmarshal(m.Content, &k)
					mu.Lock()
					keys[run.Env["GPUAAS_APP_INSTANCE_ID"]] = k
					mu.Unlock()
				}
			}
		}
		return okResult(task)
	})
	var ids []string
	for i := range 2 {
		cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "llm", "version": "1.0.0",
			"display_name": fmt.Sprintf("llm-%d", i), "operating_mode": "tenant_dedicated", "control_plane_scope": "project",
			"config": map[string]any{}}).Want(t, 202)
		if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("create: %s", op.Body)
		}
		ids = append(ids, cr.String("id"))
	}
	workload := func(id string) *servertest.Client {
		mu.Lock()
		k, ok := keys[id]
		mu.Unlock()
		if !ok {
			t.Fatalf("instance %s got no identity file", id)
		}
		return e.s.AsServiceAccount(k)
	}
	wlA, wlB := workload(ids[0]), workload(ids[1])
	path := e.path("/app-instances/" + ids[0] + "/usage")
	ev, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": "completion-1", "source": "//llm/" + ids[0], "type": "gpuaas.usage.v1",
		"time": time.Now().UTC().Format(time.RFC3339Nano), "data": map[string]any{"usage_unit": "tokens", "quantity": 4096}})
	var wg sync.WaitGroup
	var recorded, duplicate, other sync.Map
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := wlA.Do("POST", path, ev, "Content-Type", billing.MediaTypeEvent)
			if r.Status != http.StatusOK {
				other.Store(i, string(r.Body))
				return
			}
			switch r.JSON["results"].([]any)[0].(map[string]any)["status"] {
			case "recorded":
				recorded.Store(i, true)
			case "duplicate":
				duplicate.Store(i, true)
			}
		}()
	}
	wg.Wait()
	if n, dups, bad := count(&recorded), count(&duplicate), count(&other); n != 1 || dups != 99 || bad != 0 {
		t.Fatalf("100 concurrent posts: %d recorded, %d duplicates, %d refused", n, dups, bad)
	}
	recs := e.bot.Do("GET", "/api/v1/billing/usage?app_instance_id="+ids[0], nil).Want(t, 200).Items()
	if len(recs) != 1 || recs[0]["quantity"] != float64(4096) || recs[0]["app_slug"] != "llm" || recs[0]["runtime_backend"] != "launchable_oci" {
		t.Fatalf("records: %v", recs)
	}
	if r := wlB.Do("POST", path, ev, "Content-Type", billing.MediaTypeEvent).Want(t, 403); r.ErrorCode() != "permission_denied" {
		t.Fatalf("another instance's identity: %s", r.Body)
	}
	if r := e.bot.Do("POST", path, ev, "Content-Type", billing.MediaTypeEvent).Want(t, 403); r.ErrorCode() != "permission_denied" {
		t.Fatalf("the operator's own token: %s", r.Body)
	}
	bad, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": "r-1", "source": "//llm/" + ids[0], "type": "gpuaas.usage.v1",
		"data": map[string]any{"usage_unit": "requests", "quantity": 1}})
	if r := wlA.Do("POST", path, bad, "Content-Type", billing.MediaTypeEvent).Want(t, 422); r.ErrorCode() != "usage_unit_not_declared" {
		t.Fatalf("undeclared unit: %s", r.Body)
	}
}

func count(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}
