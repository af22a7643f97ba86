package billing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// insertUsage stores usage records as they are, bypassing ingest's bounds:
// records written before those bounds existed, or by a bug.
func insertUsage(t *testing.T, s *servertest.Server, recs ...billing.UsageRecord) {
	t.Helper()
	if err := s.DB.InTx(context.Background(), func(q *store.Queries) error {
		_, err := q.InsertUsageRecords(context.Background(), recs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func allocationUsage(orgID, projectID, sku string, qty int64, at time.Time) billing.UsageRecord {
	id := iam.NewID()
	return billing.UsageRecord{ID: id, DedupeKey: "test:" + id, OrgID: orgID, ProjectID: projectID, AllocationID: "alloc-" + id,
		UsageSource: billing.UsageSourceAllocation, UsageUnit: billing.UnitGPUSeconds, Quantity: qty, SKU: sku,
		StartTime: at, EndTime: at.Add(time.Hour), RecordedAt: at.Add(time.Hour)}
}

// decodeExact decodes a JSON body keeping numbers exact.
func decodeExact(t *testing.T, body []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return m
}

func metricsText(t *testing.T, s *servertest.Server) string {
	t.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestRatingParksPoisonRecords: a record whose amount overflows 64 bits
// (recorded first) no longer stops rating: the other org's record is
// charged, the poison is parked with its reason, repeated runs succeed, and
// operators see it in the unrated-usage read and in /metrics, next to a
// record that waits for a price.
func TestRatingParksPoisonRecords(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		ctx := context.Background()
		s := servertest.Start(t, d, quietWorkers)
		admin := s.Admin()
		svc := s.App.Billing()
		setPrices(t, admin)
		at := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Second)
		poison := allocationUsage("org-poison", "project-poison", "h100-80gb.1x", math.MaxInt64, at)
		unpriced := allocationUsage("org-poison", "project-poison", "no-such-sku.1x", 3600, at)
		good := allocationUsage(s.Creds.OrgID, s.Creds.ProjectID, "h100-80gb.1x", 3600, at)
		insertUsage(t, s, poison, unpriced, good)

		// (The rating worker may run too: the charges, not each run's
		// count, are what must come out right.)
		for run := range 3 {
			if _, err := svc.Rate(ctx); err != nil {
				t.Fatalf("rating run %d: %v", run, err)
			}
		}
		es := admin.Do("GET", "/api/v1/billing/ledger?project_id="+s.Creds.ProjectID, nil).Want(t, 200).Items()
		if len(es) != 1 || es[0]["usage_record_id"] != good.ID || es[0]["amount_micros"] != float64(gpuHourMicros) {
			t.Fatalf("the other tenant's charge: %v", es)
		}

		r := admin.Do("GET", "/api/v1/admin/billing/unrated-usage", nil).Want(t, 200)
		reasons := map[string]string{}
		for _, it := range r.Items() {
			reasons[it["usage_record"].(map[string]any)["id"].(string)] = it["reason"].(string)
		}
		if reasons[poison.ID] != billing.UnratedAmountOverflow || reasons[unpriced.ID] != billing.UnratedNoPrice || len(reasons) != 2 {
			t.Fatalf("unrated usage: %s", r.Body)
		}
		counts := r.JSON["counts"].(map[string]any)
		if counts["amount_overflow"] != float64(1) || counts["no_price"] != float64(1) || counts["rating_failed"] != float64(0) {
			t.Fatalf("counts: %v", counts)
		}
		m := metricsText(t, s)
		for _, want := range []string{`gpuaas_billing_unrated_usage_records{reason="amount_overflow"} 1`,
			`gpuaas_billing_unrated_usage_records{reason="no_price"} 1`} {
			if !strings.Contains(m, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		// Tenants do not read it.
		_, user := s.NewUser(admin, "tenant-"+iam.NewID()[:8]+"@example.com")
		user.Do("GET", "/api/v1/admin/billing/unrated-usage", nil).Want(t, 403)
	})
}

// TestLedgerSumsBeyond64Bits: corrections whose sum passes 2^63 (each
// accepted on its own) leave the ledger, the costs and the budget readable,
// with exact totals; so do usage totals past 2^63.
func TestLedgerSumsBeyond64Bits(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		ctx := context.Background()
		s := servertest.Start(t, d, quietWorkers)
		admin := s.Admin()
		svc := s.App.Billing()
		setPrices(t, admin)
		pid := s.Creds.ProjectID
		at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
		insertUsage(t, s, allocationUsage(s.Creds.OrgID, pid, "h100-80gb.1x", 3600, at))
		if _, err := svc.Rate(ctx); err != nil {
			t.Fatal(err)
		}
		admin.Do("PUT", "/api/v1/projects/"+pid+"/billing/budget", map[string]any{"spend_limit_micros": 1_000_000}).Want(t, 200)
		entry := admin.Do("GET", "/api/v1/billing/ledger?project_id="+pid, nil).Want(t, 200).Items()[0]["id"].(string)
		for range 3 {
			admin.Do("POST", "/api/v1/admin/billing/ledger/"+entry+"/corrections",
				map[string]any{"amount_micros": int64(math.MaxInt64), "reason": "overflow attack"}).Want(t, 201)
		}
		want := new(big.Int).Mul(big.NewInt(math.MaxInt64), big.NewInt(3))
		want.Add(want, big.NewInt(gpuHourMicros))

		ledger := decodeExact(t, admin.Do("GET", "/api/v1/billing/ledger?project_id="+pid, nil).Want(t, 200).Body)
		bal := ledger["balance"].([]any)[0].(map[string]any)
		if bal["amount_micros"].(json.Number).String() != want.String() || bal["entries"].(json.Number).String() != "4" {
			t.Fatalf("ledger balance %v, want %s over 4 entries", bal, want)
		}
		for _, q := range []string{"", "&group_by=project_id", "&group_by=entry_type"} {
			costs := decodeExact(t, admin.Do("GET", "/api/v1/billing/costs?project_id="+pid+q, nil).Want(t, 200).Body)
			if tot := costs["totals"].([]any)[0].(map[string]any); tot["amount_micros"].(json.Number).String() != want.String() {
				t.Fatalf("costs%s totals %v, want %s", q, tot, want)
			}
		}
		// The Go client (and so the CLI) reads them too.
		cc, err := client.New(s.URL, admin.Token).Costs(ctx, client.BillingQuery{ProjectID: pid})
		if err != nil || len(cc.Totals) != 1 || cc.Totals[0].AmountMicros.Cmp(want) != 0 {
			t.Fatalf("client costs: %+v %v", cc, err)
		}
		csv := admin.Do("GET", "/api/v1/billing/costs?project_id="+pid+"&format=csv", nil).Want(t, 200)
		if !strings.Contains(string(csv.Body), want.String()) {
			t.Fatalf("costs csv: %s", csv.Body)
		}
		b := admin.Do("GET", "/api/v1/projects/"+pid+"/billing/budget", nil).Want(t, 200)
		if b.JSON["spend_micros"] != float64(math.MaxInt64) {
			t.Fatalf("budget spend %v, want it held at the int64 maximum", b.JSON["spend_micros"])
		}

		// Usage totals: three records near the int64 maximum.
		var recs []billing.UsageRecord
		for range 3 {
			recs = append(recs, allocationUsage(s.Creds.OrgID, pid, "other.1x", math.MaxInt64-1, at))
		}
		insertUsage(t, s, recs...)
		u := decodeExact(t, admin.Do("GET", "/api/v1/billing/usage?project_id="+pid+"&group_by=sku", nil).Want(t, 200).Body)
		wantQ := new(big.Int).Mul(big.NewInt(math.MaxInt64-1), big.NewInt(3)).String()
		found := false
		for _, g := range u["groups"].([]any) {
			g := g.(map[string]any)
			if g["keys"].(map[string]any)["sku"] == "other.1x" {
				found = g["quantity"].(json.Number).String() == wantQ
			}
		}
		if !found {
			t.Fatalf("usage totals %v, want %s for other.1x", u, wantQ)
		}
	})
}

// TestUsageWindowAndPriceEffectivity: start_time cannot backdate usage
// past the late-event window; ids with NUL, quoted or unratable quantities
// and unratable prices are refused alike on both dialects; an event stamped
// with the whole second in which a price was created is rated at that
// price, which records who created it.
func TestUsageWindowAndPriceEffectivity(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		ctx := context.Background()
		clk := newClock()
		s := servertest.Start(t, d, quietWorkers, servertest.WithClock(clk))
		admin := s.Admin()
		svc := s.App.Billing()
		pid := s.Creds.ProjectID
		now := clk.Now().UTC()
		wl := newWorkload(t, s, admin, pid, "req-app", "requests", "", now.Add(-time.Hour), time.Time{})
		path := usagePath(pid, wl.ID)
		source := "//req-app/" + wl.ID

		old := usageEvent("old", source, "requests", 5, now)
		old["data"].(map[string]any)["start_time"] = now.Add(-100 * time.Hour).Format(time.RFC3339)
		r := wl.Bot.Do("POST", path, old, "Content-Type", billing.MediaTypeEvent)
		if r.Status != http.StatusBadRequest || r.ErrorCode() != "usage_event_out_of_window" || !strings.Contains(string(r.Body), "/data/start_time") {
			t.Errorf("backdated start_time: %s", r.Body)
		}

		nul := usageEvent("a\x00b", source, "requests", 1, now)
		quoted := usageEvent("quoted", source, "requests", 1, now)
		quoted["data"].(map[string]any)["quantity"] = "5"
		huge := usageEvent("huge", source, "requests", billing.MaxQuantity+1, now)
		for name, ev := range map[string]map[string]any{"/id": nul, "/data/quantity": quoted, "/data/quantity ": huge} {
			r := wl.Bot.Do("POST", path, ev, "Content-Type", billing.MediaTypeEvent)
			if r.Status != http.StatusBadRequest || r.ErrorCode() != "invalid_usage_event" || !strings.Contains(string(r.Body), strings.TrimSpace(name)) {
				t.Errorf("%s: %s", name, r.Body)
			}
		}
		r = admin.Do("POST", "/api/v1/admin/billing/prices", map[string]any{"usage_source": "app_runtime", "meter": "other-app/requests",
			"unit_price_micros": billing.MaxMicrosPerUnit + 1})
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "/unit_price_micros") {
			t.Errorf("an unratable price: %s", r.Body)
		}

		// A fresh second's first fifth: the price is created after the
		// whole second the event is stamped with.
		clk.Set(clk.Now().Truncate(time.Second).Add(time.Second + 200*time.Millisecond))
		p := admin.Do("POST", "/api/v1/admin/billing/prices", map[string]any{"usage_source": "app_runtime", "meter": "req-app/requests",
			"unit_price_micros": 7}).Want(t, 201)
		if eff, err := time.Parse(time.RFC3339Nano, p.String("effective_from")); err != nil || eff.Nanosecond() != 0 || !strings.HasPrefix(p.String("created_by"), "user:") {
			t.Errorf("price (want whole-second effect, created by the admin): %s", p.Body)
		}
		stamp := clk.Now().UTC().Truncate(time.Second)
		wl.Bot.Do("POST", path, usageEvent("whole-second", source, "requests", 3, stamp), "Content-Type", billing.MediaTypeEvent).Want(t, 200)
		if _, err := svc.Rate(ctx); err != nil {
			t.Fatalf("rating the whole-second event: %v", err)
		}
		es := admin.Do("GET", "/api/v1/billing/ledger?project_id="+pid, nil).Want(t, 200).Items()
		if len(es) != 1 || es[0]["amount_micros"] != float64(21) {
			t.Fatalf("ledger: %v", es)
		}
	})
}

// TestOverlappingUsageBatches: 100 concurrent batches drawing overlapping
// events in different orders all succeed, and every event is stored once
// (PostgreSQL deadlocked on these before inserts were key-ordered).
func TestOverlappingUsageBatches(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		s := servertest.Start(t, d, quietWorkers)
		admin := s.Admin()
		pid := s.Creds.ProjectID
		now := time.Now().UTC()
		wl := newWorkload(t, s, admin, pid, "tok-app", "tokens", "", now.Add(-time.Hour), time.Time{})
		path := usagePath(pid, wl.ID)
		source := "//tok-app/" + wl.ID
		const pool, perBatch, batches = 300, 60, 100
		var wg sync.WaitGroup
		var mu sync.Mutex
		failures := map[string]int{}
		recorded, distinct := 0, map[int]bool{}
		for b := range batches {
			rng := rand.New(rand.NewPCG(uint64(b), 18))
			evs := make([]any, 0, perBatch)
			for _, i := range rng.Perm(pool)[:perBatch] {
				distinct[i] = true
				evs = append(evs, usageEvent(fmt.Sprintf("evt-%d", i), source, "tokens", 1, now.Add(-time.Minute)))
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := wl.Bot.Do("POST", path, evs, "Content-Type", billing.MediaTypeBatch)
				mu.Lock()
				defer mu.Unlock()
				if r.Status != http.StatusOK {
					failures[fmt.Sprintf("%d %s", r.Status, r.ErrorCode())]++
					return
				}
				recorded += int(r.JSON["recorded"].(float64))
			}()
		}
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("failed batches: %v", failures)
		}
		total, err := s.DB.Queries().GroupUsage(context.Background(), billing.UsageFilter{AppInstanceID: wl.ID}, nil)
		if err != nil || len(total) != 1 || total[0].Records != int64(len(distinct)) || total[0].Quantity.Int64() != int64(len(distinct)) ||
			recorded != len(distinct) {
			t.Fatalf("stored %+v (%v), answers said %d recorded; want each of the %d distinct events once", total, err, recorded, len(distinct))
		}
	})
}

// An event is a duplicate only of one its own instance reported: two
// instances of an app in one project that use one source and count their
// ids alike (or one that reports the other's ids on purpose) each have
// their usage recorded, and each instance's retries still count once. The
// event reported first keeps the project-wide key, so events stored before
// the rule still dedupe as they did.
func TestUsageDedupeIsPerInstance(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		ctx := context.Background()
		s := servertest.Start(t, d, quietWorkers)
		admin := s.Admin()
		pid := s.Creds.ProjectID
		now := time.Now().UTC()
		a := newWorkload(t, s, admin, pid, "tok-app", "tokens", "", now.Add(-time.Hour), time.Time{})
		b := newWorkload(t, s, admin, pid, "tok-app", "tokens", "", now.Add(-time.Hour), time.Time{})
		const source = "//tok-app"
		post := func(w workload, evs ...any) (recorded, duplicates float64) {
			t.Helper()
			r := w.Bot.Do("POST", usagePath(pid, w.ID), evs, "Content-Type", billing.MediaTypeBatch).Want(t, 200)
			return r.JSON["recorded"].(float64), r.JSON["duplicates"].(float64)
		}
		at := now.Add(-time.Minute)
		for _, c := range []struct {
			name           string
			w              workload
			evs            []any
			recorded, dups float64
		}{
			{"a reports evt-1", a, []any{usageEvent("evt-1", source, "tokens", 5, at)}, 1, 0},
			{"b reports its own evt-1", b, []any{usageEvent("evt-1", source, "tokens", 700, at)}, 1, 0},
			{"b again, with evt-2 twice", b, []any{usageEvent("evt-1", source, "tokens", 700, at),
				usageEvent("evt-2", source, "tokens", 30, at), usageEvent("evt-2", source, "tokens", 30, at)}, 1, 2},
			{"a again, with b's evt-2", a, []any{usageEvent("evt-1", source, "tokens", 5, at), usageEvent("evt-2", source, "tokens", 1, at)}, 1, 1},
			{"b again", b, []any{usageEvent("evt-1", source, "tokens", 700, at), usageEvent("evt-2", source, "tokens", 30, at)}, 0, 2},
		} {
			if rec, dup := post(c.w, c.evs...); rec != c.recorded || dup != c.dups {
				t.Fatalf("%s: %v recorded, %v duplicates; want %v and %v", c.name, rec, dup, c.recorded, c.dups)
			}
		}
		for _, w := range []struct {
			wl       workload
			quantity int64
		}{{a, 5 + 1}, {b, 700 + 30}} {
			g, err := s.DB.Queries().GroupUsage(ctx, billing.UsageFilter{AppInstanceID: w.wl.ID}, nil)
			if err != nil || len(g) != 1 || g[0].Records != 2 || g[0].Quantity.Int64() != w.quantity {
				t.Fatalf("usage of %s: %+v (%v), want 2 records of %d in all", w.wl.ID, g, err, w.quantity)
			}
		}
		for _, k := range []struct{ key, owner string }{
			{billing.DedupeKeyForEvent(pid, source, "evt-1"), a.ID},
			{billing.InstanceDedupeKey(b.ID, source, "evt-1"), b.ID},
			{billing.DedupeKeyForEvent(pid, source, "evt-2"), b.ID},
			{billing.InstanceDedupeKey(a.ID, source, "evt-2"), a.ID},
		} {
			if r, err := s.DB.Queries().GetUsageByDedupeKey(ctx, k.key); err != nil || r.AppInstanceID != k.owner {
				t.Fatalf("record under %s: instance %q (%v), want %s", k.key, r.AppInstanceID, err, k.owner)
			}
		}
	})
}

// A usage post of 10,000 events (the batch limit) no longer becomes one
// 2.6 MB event over the bus's message limit: it emits one
// billing.usage.recorded event per 100 new records, each small.
func TestLargeUsagePostEmitsBoundedEvents(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		s := servertest.Start(t, d, quietWorkers)
		admin := s.Admin()
		pid := s.Creds.ProjectID
		now := time.Now().UTC()
		wl := newWorkload(t, s, admin, pid, "big-app", "tokens", "", now.Add(-time.Hour), time.Time{})
		source := "//big-app/" + wl.ID
		evs := make([]any, 10000)
		for i := range evs {
			evs[i] = usageEvent(fmt.Sprintf("evt-%05d", i), source, "tokens", 1, now.Add(-time.Minute))
		}
		r := wl.Bot.Do("POST", usagePath(pid, wl.ID), evs, "Content-Type", billing.MediaTypeBatch).Want(t, http.StatusOK)
		if r.JSON["recorded"] != float64(10000) {
			t.Fatalf("recorded %v", r.JSON["recorded"])
		}
		sequenceAll(t, s) // lists show sequenced events
		var events, records int
		cursor := ""
		for {
			page := admin.Do("GET", "/api/v1/projects/"+pid+"/events?type=billing.usage.recorded&limit=500"+cursor, nil).Want(t, 200)
			for _, e := range page.Items() {
				b, _ := json.Marshal(e["data"])
				if len(b) > storage.MaxEventDataBytes/2 {
					t.Fatalf("an event of %d bytes", len(b))
				}
				events++
				records += len(e["data"].(map[string]any)["records"].([]any))
			}
			next, _ := page.JSON["next_cursor"].(string)
			if next == "" {
				break
			}
			cursor = "&cursor=" + next
		}
		if events != 100 || records != 10000 {
			t.Fatalf("%d events carrying %d records, want 100 carrying 10000", events, records)
		}
	})
}

// sequenceAll runs the relay until every committed outbox row has its
// position, so event lists show them.
func sequenceAll(t *testing.T, s *servertest.Server) {
	t.Helper()
	relay := s.App.Relay()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		pending, err := s.DB.Queries().HasUnsequencedEvents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !pending {
			return
		}
		runs := relay.Runs()
		relay.Kick()
		if err := relay.WaitRuns(ctx, runs+1); err != nil {
			t.Fatal("the relay did not sequence the outbox")
		}
	}
}

// A tenant-shared instance's usage for an attached project is that
// project's: its billing.usage.recorded event is in the attached project's
// scope (where its ledger entries are), and the home project's stream
// carries only the home project's own usage (its readers may not read a
// sibling project's usage).
func TestSharedInstanceUsageEventsAreInTheBilledProjectsScope(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		s := servertest.Start(t, d, quietWorkers)
		admin := s.Admin()
		home := s.Creds.ProjectID
		attached := admin.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/projects", map[string]string{"slug": "team-b", "name": "team-b"}).Want(t, 201).String("id")
		now := time.Now().UTC()
		wl := newWorkload(t, s, admin, home, "shared-app", "tokens", "", now.Add(-time.Hour), time.Time{},
			func(i *instances.AppInstance) { i.ControlPlaneScope = "tenant" })
		ctx := context.Background()
		if err := s.DB.InTx(ctx, func(q *store.Queries) error {
			return q.InsertInstanceAttachment(ctx, instances.Attachment{InstanceID: wl.ID, ProjectID: attached, OrgID: s.Creds.OrgID,
				AttachedBy: "user:test", CreatedAt: now})
		}); err != nil {
			t.Fatal(err)
		}
		source := "//shared-app/" + wl.ID
		forB := usageEvent("for-b", source, "tokens", 7, now.Add(-time.Minute))
		forB["projectid"] = attached
		wl.Bot.Do("POST", usagePath(home, wl.ID), []any{usageEvent("for-home", source, "tokens", 5, now.Add(-time.Minute)), forB},
			"Content-Type", billing.MediaTypeBatch).Want(t, http.StatusOK)
		sequenceAll(t, s)
		for project, want := range map[string]string{home: "for-home", attached: "for-b"} {
			var got []string
			for _, e := range admin.Do("GET", "/api/v1/projects/"+project+"/events?type=billing.usage.recorded", nil).Want(t, 200).Items() {
				for _, r := range e["data"].(map[string]any)["records"].([]any) {
					got = append(got, r.(map[string]any)["event_id"].(string))
				}
			}
			if len(got) != 1 || got[0] != want {
				t.Errorf("project %s (home %v) has usage events for %v, want [%s]", project, project == home, got, want)
			}
		}
	})
}
