package billing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// quietWorkers leaves metering and rating to the test's explicit calls.
func quietWorkers(c *config.Config) { c.BillingMeterInterval = time.Hour }

const (
	gpuHourMicros  = 2_500_000 // h100-80gb.1x: 2.50 per GPU-hour
	sessionMicros  = 100       // sess-app: 0.0001 per session second
	tokensPer1000  = 30        // every app: 0.00003 per 1000 tokens
	allocationsAPI = "/api/v1/admin/allocations"
)

func setPrices(t *testing.T, admin *servertest.Client) {
	t.Helper()
	admin.Do("POST", "/api/v1/admin/billing/prices", map[string]any{"usage_source": "allocation", "sku": "h100-80gb.1x",
		"unit_price_micros": gpuHourMicros, "effective_from": "2020-01-01T00:00:00Z"}).Want(t, 201)
	admin.Do("POST", "/api/v1/admin/billing/prices", map[string]any{"usage_source": "app_runtime", "meter": "sess-app/session_seconds",
		"unit_price_micros": sessionMicros, "effective_from": "2020-01-01T00:00:00Z"}).Want(t, 201)
	admin.Do("POST", "/api/v1/admin/billing/prices", map[string]any{"usage_source": "app_runtime", "meter": "*/tokens",
		"unit_price_micros": tokensPer1000, "per_quantity": 1000, "effective_from": "2020-01-01T00:00:00Z"}).Want(t, 201)
}

func countAllocations(t *testing.T, admin *servertest.Client) int {
	t.Helper()
	return len(admin.Do("GET", allocationsAPI+"?limit=500", nil).Want(t, 200).Items())
}

// TestMeteringRatingAndBudgets: an instance runs for a measured interval on
// a real allocation; its session seconds and the allocation's GPU-seconds
// appear in /billing/usage with every attribution field and rate into
// ledger entries whose sum is price × quantity; a correction is a new
// linked entry; launches over the GPU quota or the spend budget are refused
// before anything is placed, and succeed within them.
func TestMeteringRatingAndBudgets(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		ctx := context.Background()
		clk := newClock()
		s := servertest.Start(t, d, quietWorkers, servertest.WithClock(clk))
		admin := s.Admin()
		pid := s.Creds.ProjectID
		svc := s.App.Billing()
		setPrices(t, admin)
		joinNode(t, s, admin, "gpu-a", 4)

		budget := "/api/v1/projects/" + pid + "/billing/budget"
		admin.Do("GET", budget, nil).Want(t, 404)
		b := admin.Do("PUT", budget, map[string]any{"gpu_quota": 1, "spend_limit_micros": 1_000_000_000, "soft_threshold_percent": 50}).Want(t, 200)
		if b.JSON["gpus_in_use"].(float64) != 0 || b.JSON["period"] != "month" {
			t.Fatalf("budget: %s", b.Body)
		}

		// Metering cuts intervals at whole hours (the slice length): the
		// allocation's few seconds stay inside one hour (newClock), so it is
		// one record.
		if left := clk.Now().Truncate(time.Hour).Add(time.Hour).Sub(clk.Now()); left < 15*time.Second {
			t.Fatalf("the clock stands %v before a whole hour; the allocation would cross it", left)
		}
		// Within the quota: placed. Over it: refused, nothing placed.
		alloc := admin.Do("POST", allocationsAPI, map[string]any{"project_id": pid, "sku": "h100-80gb.1x"}).Want(t, 201)
		allocID := alloc.String("id")
		before := countAllocations(t, admin)
		over := admin.Do("POST", allocationsAPI, map[string]any{"project_id": pid, "sku": "h100-80gb.1x"}).Want(t, 409)
		if over.ErrorCode() != "quota_exceeded" || !strings.Contains(string(over.Body), "GPU quota of 1") || !strings.Contains(string(over.Body), "holds 1") {
			t.Fatalf("over quota: %s", over.Body)
		}
		if n := countAllocations(t, admin); n != before {
			t.Fatalf("a refused launch placed an allocation: %d → %d", before, n)
		}

		// The session: 90 measured seconds on the allocation, inside one
		// hour (one slice, one record) and wholly in the past.
		end := clk.Now().UTC().Add(-5 * time.Second).Truncate(time.Second)
		if end.Sub(end.Truncate(time.Hour)) < 90*time.Second {
			end = end.Truncate(time.Hour).Add(-time.Minute)
		}
		wl := newWorkload(t, s, admin, pid, "sess-app", "session_seconds", allocID, end.Add(-90*time.Second), end)
		// The allocation: held for two whole seconds of the server's clock,
		// then released.
		const held = 2
		clk.Advance(held * time.Second)
		admin.Do("POST", allocationsAPI+"/"+allocID+"/release", nil).Want(t, 200)

		n, err := svc.Meter(ctx)
		if err != nil || n != 2 {
			t.Fatalf("metering wrote %d records, %v; want the GPU-seconds and the session seconds", n, err)
		}
		if n, err := svc.Meter(ctx); err != nil || n != 0 {
			t.Fatalf("metering again wrote %d records, %v; a rerun must not count twice", n, err)
		}
		// Recording kicks the rating worker too; whichever rater gets there
		// first, each record is charged once (the ledger below has two).
		for range 2 {
			if _, err := svc.Rate(ctx); err != nil {
				t.Fatal(err)
			}
		}

		// The quickstart's query: the instance's app-runtime usage, every anchor present.
		u := admin.Do("GET", "/api/v1/billing/usage?app_instance_id="+wl.ID+"&usage_source=app_runtime", nil).Want(t, 200).Items()
		if len(u) != 1 {
			t.Fatalf("app usage of the instance: %v", u)
		}
		sess := u[0]
		want := map[string]any{"org_id": s.Creds.OrgID, "project_id": pid, "app_instance_id": wl.ID, "app_slug": "sess-app",
			"operating_mode": "tenant_dedicated", "control_plane_scope": "project", "runtime_backend": "slurm",
			"usage_source": "app_runtime", "usage_unit": "session_seconds", "quantity": float64(90), "meter": "sess-app/session_seconds"}
		for k, v := range want {
			if sess[k] != v {
				t.Errorf("session record %s = %v, want %v", k, sess[k], v)
			}
		}
		if sess["correlation_id"] == "" || sess["start_time"] == "" || sess["end_time"] == "" {
			t.Errorf("session record lacks correlation or interval: %v", sess)
		}
		a := admin.Do("GET", "/api/v1/billing/usage?project_id="+pid+"&usage_source=allocation", nil).Want(t, 200).Items()
		ivs, err := s.DB.Queries().AllocationIntervals(ctx, pid, time.Time{}, clk.Now().Add(time.Hour))
		if err != nil || len(ivs) != 1 || len(a) != 1 {
			t.Fatalf("allocation usage %v, intervals %v %v", a, ivs, err)
		}
		gpuSecs := int64(ivs[0].EndedAt.Truncate(time.Second).Sub(ivs[0].StartedAt.Truncate(time.Second)) / time.Second)
		if gpuSecs != held || a[0]["quantity"] != float64(gpuSecs) || a[0]["sku"] != "h100-80gb.1x" || a[0]["allocation_id"] != allocID ||
			a[0]["usage_unit"] != "gpu_seconds" || a[0]["org_id"] != s.Creds.OrgID || a[0]["project_id"] != pid {
			t.Fatalf("allocation record %v, want %d gpu_seconds of %s", a[0], gpuSecs, allocID)
		}

		// The ledger: one charge per record, summing to price × quantity.
		wantAlloc, _ := billing.Amount(gpuSecs, gpuHourMicros, 3600)
		wantSess, _ := billing.Amount(90, sessionMicros, 1)
		led := admin.Do("GET", "/api/v1/billing/ledger?project_id="+pid, nil).Want(t, 200)
		var sum int64
		var sessEntry string
		for _, e := range led.Items() {
			sum += int64(e["amount_micros"].(float64))
			if e["usage_source"] == "app_runtime" {
				sessEntry = e["id"].(string)
			}
		}
		if len(led.Items()) != 2 || sum != wantAlloc+wantSess || balance(t, led) != sum {
			t.Fatalf("ledger %s: sum %d, want %d + %d", led.Body, sum, wantAlloc, wantSess)
		}

		// Tenants see the combined cost; the breakdown is the operators'.
		viewerID, viewer := s.NewUser(admin, "viewer@example.com")
		admin.Do("POST", "/api/v1/projects/"+pid+"/members", map[string]any{"user_id": viewerID, "role": "project_viewer"}).Want(t, 201)
		costs := viewer.Do("GET", "/api/v1/billing/costs?project_id="+pid, nil).Want(t, 200)
		if tot := costs.JSON["totals"].([]any); len(tot) != 1 || int64(tot[0].(map[string]any)["amount_micros"].(float64)) != sum {
			t.Fatalf("combined cost: %s", costs.Body)
		}
		viewer.Do("GET", "/api/v1/billing/costs?project_id="+pid+"&group_by=usage_source", nil).Want(t, 403)
		br := admin.Do("GET", "/api/v1/billing/costs?project_id="+pid+"&group_by=usage_source,usage_unit", nil).Want(t, 200)
		if len(br.JSON["groups"].([]any)) != 2 {
			t.Fatalf("breakdown: %s", br.Body)
		}
		csv := admin.Do("GET", "/api/v1/billing/usage?project_id="+pid+"&format=csv", nil).Want(t, 200)
		if lines := strings.Split(strings.TrimSpace(string(csv.Body)), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "id,org_id,project_id,app_instance_id") {
			t.Fatalf("csv export: %s", csv.Body)
		}

		// The ledger is append-only: a correction is a new entry linked to
		// the original, and the balance reflects it.
		fix := admin.Do("POST", "/api/v1/admin/billing/ledger/"+sessEntry+"/corrections",
			map[string]any{"amount_micros": -500, "reason": "session outage credit"}).Want(t, 201)
		if fix.JSON["corrects_entry_id"] != sessEntry || fix.JSON["entry_type"] != "correction" {
			t.Fatalf("correction: %s", fix.Body)
		}
		led = admin.Do("GET", "/api/v1/billing/ledger?project_id="+pid, nil).Want(t, 200)
		if balance(t, led) != sum-500 || len(led.Items()) != 3 {
			t.Fatalf("balance after correction: %s", led.Body)
		}
		viewer.Do("POST", "/api/v1/admin/billing/ledger/"+sessEntry+"/corrections", map[string]any{"amount_micros": -1, "reason": "x"}).Want(t, 403)

		// The spend budget: at the limit, launches are refused before
		// anything is placed; raised, they succeed.
		spent := sum - 500
		admin.Do("PUT", budget, map[string]any{"gpu_quota": 4, "spend_limit_micros": spent, "soft_threshold_percent": 50}).Want(t, 200)
		before = countAllocations(t, admin)
		refused := admin.Do("POST", allocationsAPI, map[string]any{"project_id": pid, "sku": "h100-80gb.1x"}).Want(t, 409)
		if refused.ErrorCode() != "budget_exceeded" || !strings.Contains(string(refused.Body), "budget") {
			t.Fatalf("over budget: %s", refused.Body)
		}
		if n := countAllocations(t, admin); n != before {
			t.Fatal("a launch over budget placed an allocation")
		}
		if err := svc.CheckInstance(ctx, nil, pid, "sess-app"); err == nil || !strings.Contains(err.Error(), "budget_exceeded") {
			t.Fatalf("instance launch over budget: %v", err)
		}
		admin.Do("PUT", budget, map[string]any{"gpu_quota": 4, "spend_limit_micros": spent * 10}).Want(t, 200)
		admin.Do("POST", allocationsAPI, map[string]any{"project_id": pid, "sku": "h100-80gb.1x"}).Want(t, 201)
		if err := svc.CheckInstance(ctx, nil, pid, "sess-app"); err != nil {
			t.Fatalf("instance launch within budget: %v", err)
		}
	})
}

func balance(t *testing.T, r *servertest.Response) int64 {
	t.Helper()
	bs, _ := r.JSON["balance"].([]any)
	if len(bs) != 1 {
		t.Fatalf("balance: %s", r.Body)
	}
	return int64(bs[0].(map[string]any)["amount_micros"].(float64))
}

// TestThresholdEvent: rating that takes a project's spend past its soft
// threshold and its limit emits billing.budget.threshold_crossed once each.
func TestThresholdEvent(t *testing.T) {
	ctx := context.Background()
	s := servertest.Start(t, store.SQLite, quietWorkers)
	admin := s.Admin()
	pid := s.Creds.ProjectID
	setPrices(t, admin)
	admin.Do("PUT", "/api/v1/projects/"+pid+"/billing/budget", map[string]any{"spend_limit_micros": 1000, "soft_threshold_percent": 50}).Want(t, 200)
	end := time.Now().UTC().Add(-time.Second).Truncate(time.Second)
	newWorkload(t, s, admin, pid, "sess-app", "session_seconds", "", end.Add(-20*time.Second), end) // 20 s × 100 = 2000 > 1000
	if _, err := s.App.Billing().Meter(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.App.Billing().Rate(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := s.DB.Queries().AllEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	levels := map[string]int{}
	for _, e := range evs {
		if e.Type == billing.EventBudgetThresholdCrossed {
			var d struct{ Level string }
			_ = json.Unmarshal(e.Data, &d)
			levels[d.Level]++
		}
	}
	if levels["soft"] != 1 || levels["limit"] != 1 {
		t.Fatalf("threshold events %v, want soft and limit once each", levels)
	}
}

// TestUsageIngest: the same event posted 100 times concurrently counts
// once; events from another instance's token, for another project or in an
// undeclared unit are refused with a clear error.
func TestUsageIngest(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		ctx := context.Background()
		s := servertest.Start(t, d, quietWorkers)
		admin := s.Admin()
		pid := s.Creds.ProjectID
		setPrices(t, admin)
		now := time.Now().UTC()
		wl := newWorkload(t, s, admin, pid, "tok-app", "tokens", "", now.Add(-time.Hour), time.Time{})
		other := newWorkload(t, s, admin, pid, "req-app", "requests", "", now.Add(-time.Hour), time.Time{})
		path := usagePath(pid, wl.ID)
		source := "//tok-app/" + wl.ID
		ev := usageEvent("evt-1", source, "tokens", 1234, now.Add(-time.Minute))
		body, _ := json.Marshal(ev)

		var wg sync.WaitGroup
		var mu sync.Mutex
		status := map[string]int{}
		for range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := wl.Bot.Do("POST", path, body, "Content-Type", billing.MediaTypeEvent)
				mu.Lock()
				defer mu.Unlock()
				if r.Status != http.StatusOK {
					status[fmt.Sprintf("http %d: %s", r.Status, r.Body)]++
					return
				}
				status[r.JSON["results"].([]any)[0].(map[string]any)["status"].(string)]++
			}()
		}
		wg.Wait()
		if status["recorded"] != 1 || status["duplicate"] != 99 {
			t.Fatalf("100 concurrent posts of one event: %v", status)
		}
		recs := admin.Do("GET", "/api/v1/billing/usage?app_instance_id="+wl.ID, nil).Want(t, 200).Items()
		if len(recs) != 1 || recs[0]["quantity"] != float64(1234) || recs[0]["event_id"] != "evt-1" || recs[0]["event_source"] != source {
			t.Fatalf("records after 100 posts: %v", recs)
		}

		// A batch; duplicates inside it and against earlier posts count once.
		batch := []any{ev}
		for i := range 10 {
			batch = append(batch, usageEvent(fmt.Sprintf("evt-b%d", i), source, "tokens", 100, now.Add(-time.Minute)))
		}
		batch = append(batch, batch[1])
		r := wl.Bot.Do("POST", path, batch, "Content-Type", billing.MediaTypeBatch).Want(t, 200)
		if r.JSON["recorded"] != float64(10) || r.JSON["duplicates"] != float64(2) {
			t.Fatalf("batch: %s", r.Body)
		}

		refusals := []struct {
			name   string
			c      *servertest.Client
			path   string
			event  map[string]any
			status int
			code   string
		}{
			{"another instance's token", other.Bot, path, usageEvent("x1", source, "tokens", 1, now), 403, "permission_denied"},
			{"an undeclared unit", wl.Bot, path, usageEvent("x2", source, "requests", 1, now), 422, "usage_unit_not_declared"},
			{"a platform-measured unit", wl.Bot, path, usageEvent("x3", source, "session_seconds", 1, now), 422, "usage_unit_not_declared"},
			{"another project's id", wl.Bot, path, with(usageEvent("x4", source, "tokens", 1, now), "projectid", s.Creds.OrgID), 422, "usage_project_mismatch"},
			{"another instance as subject", wl.Bot, path, with(usageEvent("x5", source, "tokens", 1, now), "subject", other.ID), 422, "usage_instance_mismatch"},
			{"a future time", wl.Bot, path, usageEvent("x6", source, "tokens", 1, now.Add(time.Hour)), 400, "usage_event_out_of_window"},
			{"a too-late time", wl.Bot, path, usageEvent("x7", source, "tokens", 1, now.Add(-100*time.Hour)), 400, "usage_event_out_of_window"},
			{"the admin's token", admin, path, usageEvent("x8", source, "tokens", 1, now), 403, "permission_denied"},
		}
		for _, rc := range refusals {
			r := rc.c.Do("POST", rc.path, rc.event, "Content-Type", billing.MediaTypeEvent).Want(t, rc.status)
			if r.ErrorCode() != rc.code {
				t.Errorf("%s: code %q, want %q: %s", rc.name, r.ErrorCode(), rc.code, r.Body)
			}
		}

		// Another project: its service accounts do not even see this one.
		pidB := admin.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/projects", map[string]string{"slug": "other", "name": "Other"}).Want(t, 201).String("id")
		wlB := newWorkload(t, s, admin, pidB, "tok-b", "tokens", "", now.Add(-time.Hour), time.Time{})
		if r := wlB.Bot.Do("POST", path, usageEvent("y1", source, "tokens", 1, now), "Content-Type", billing.MediaTypeEvent).Want(t, 404); r.ErrorCode() != "project_not_found" {
			t.Fatalf("another project's workload: %s", r.Body)
		}
		if r := wlB.Bot.Do("POST", usagePath(pidB, wl.ID), usageEvent("y2", source, "tokens", 1, now), "Content-Type", billing.MediaTypeEvent).Want(t, 404); r.ErrorCode() != "app_instance_not_found" {
			t.Fatalf("an instance of another project under one's own: %s", r.Body)
		}
		wlB.Bot.Do("GET", "/api/v1/billing/usage?project_id="+pid, nil).Want(t, 404)
		if r := wlB.Bot.Do("GET", "/api/v1/billing/usage?app_instance_id="+wl.ID, nil).Want(t, 404); r.ErrorCode() != "app_instance_not_found" || strings.Contains(string(r.Body), pid) {
			t.Fatalf("another tenant's instance: %s", r.Body)
		}

		total, err := s.DB.Queries().GroupUsage(ctx, billing.UsageFilter{AppInstanceID: wl.ID}, nil)
		if err != nil || len(total) != 1 || total[0].Records != 11 || total[0].Quantity.Int64() != 1234+1000 {
			t.Fatalf("after refusals: %+v %v", total, err)
		}
	})
}

func with(ev map[string]any, k, v string) map[string]any { ev[k] = v; return ev }
