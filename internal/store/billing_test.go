package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

func TestBillingConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		t.Run("usage_dedupe", func(t *testing.T) { testUsageDedupe(t, db) })
		t.Run("ledger_append_only", func(t *testing.T) { testLedgerAppendOnly(t, db) })
		t.Run("price_at", func(t *testing.T) { testPriceAt(t, db) })
	})
}

func usageRec(key string, qty int64, at time.Time) billing.UsageRecord {
	return billing.UsageRecord{ID: newID(), DedupeKey: key, OrgID: "o1", ProjectID: "p1", AppInstanceID: "i1",
		UsageSource: billing.UsageSourceAppRuntime, UsageUnit: "tokens", Quantity: qty, Meter: "app/tokens",
		StartTime: at, EndTime: at, RecordedAt: at}
}

// testUsageDedupe: the unique key, not a time window, decides duplicates —
// inside one batch, across batches, and across concurrent writers.
func testUsageDedupe(t *testing.T, db *store.DB) {
	ctx := context.Background()
	now := time.Now().UTC()
	var batch []billing.UsageRecord
	for i := range 1200 { // more than one insert chunk
		batch = append(batch, usageRec(fmt.Sprintf("k%d", i%1000), 1, now))
	}
	stored, err := db.Queries().InsertUsageRecords(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 1000 {
		t.Fatalf("stored %d records of 1000 distinct keys", len(stored))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- db.InTx(ctx, func(q *store.Queries) error {
				s, err := q.InsertUsageRecords(ctx, []billing.UsageRecord{usageRec("k7", 1, now), usageRec("fresh", 5, now)})
				if err == nil && len(s) > 1 {
					err = fmt.Errorf("a writer stored %d records, at most the fresh one is new", len(s))
				}
				return err
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	groups, err := db.Queries().GroupUsage(ctx, billing.UsageFilter{ProjectID: "p1"}, nil)
	if err != nil || len(groups) != 1 || groups[0].Quantity.Int64() != 1005 || groups[0].Records != 1001 {
		t.Fatalf("totals after duplicates: %+v %v", groups, err)
	}
}

// testLedgerAppendOnly: the database itself refuses to rewrite the ledger,
// whatever statement reaches it.
func testLedgerAppendOnly(t *testing.T, db *store.DB) {
	ctx := context.Background()
	now := time.Now().UTC()
	u := usageRec("ledger-"+newID(), 10, now)
	if _, err := db.Queries().InsertUsageRecords(ctx, []billing.UsageRecord{u}); err != nil {
		t.Fatal(err)
	}
	charge := billing.LedgerEntry{ID: newID(), OrgID: "o1", ProjectID: "p1", EntryType: billing.EntryCharge, UsageRecordID: u.ID,
		UsageSource: u.UsageSource, UsageUnit: "tokens", Quantity: 10, PerQuantity: 1, UnitPriceMicros: 7, AmountMicros: 70,
		Currency: "USD", UsageTime: now, CreatedBy: "system:billing", CreatedAt: now}
	q := db.Queries()
	if err := q.InsertLedgerEntry(ctx, charge); err != nil {
		t.Fatal(err)
	}
	second := charge
	second.ID = newID()
	if err := q.InsertLedgerEntry(ctx, second); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("second charge for one usage record: got %v, want ErrAlreadyExists", err)
	}
	for _, stmt := range []string{
		`UPDATE ledger_entries SET amount_micros = 1 WHERE id = ?`,
		`DELETE FROM ledger_entries WHERE id = ?`,
		`UPDATE usage_records SET quantity = 0 WHERE id = ?`,
		`DELETE FROM usage_records WHERE id = ?`,
	} {
		id := charge.ID
		if strings.Contains(stmt, "usage_records") {
			id = u.ID
		}
		err := store.ExecForTest(ctx, db, stmt, id)
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Fatalf("%s: got %v, want an append-only refusal", stmt, err)
		}
	}
	fix := billing.LedgerEntry{ID: newID(), OrgID: "o1", ProjectID: "p1", EntryType: billing.EntryCorrection, CorrectsEntryID: charge.ID,
		UsageSource: u.UsageSource, AmountMicros: -30, Currency: "USD", Reason: "refund", UsageTime: now,
		CreatedBy: "user:admin", CreatedAt: now}
	if err := q.InsertLedgerEntry(ctx, fix); err != nil {
		t.Fatal(err)
	}
	got, err := q.GetLedgerEntry(ctx, charge.ID)
	if err != nil || got.AmountMicros != 70 {
		t.Fatalf("the charge changed: %+v %v", got, err)
	}
	bal, err := q.ProjectSpend(ctx, "p1", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil || bal != 40 {
		t.Fatalf("balance = %d, %v; want 70-30 = 40", bal, err)
	}
}

func testPriceAt(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := db.Queries()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for v, at := range []time.Time{t0, t0.Add(48 * time.Hour)} {
		p := billing.Price{ID: newID(), UsageSource: billing.UsageSourceAllocation, SKU: "h100-80gb.1x", UsageUnit: "gpu_seconds",
			Version: v + 1, UnitPriceMicros: int64(1000 * (v + 1)), PerQuantity: 3600, Currency: "USD", EffectiveFrom: at,
			CreatedBy: "user:a", CreatedAt: at}
		if err := q.InsertPrice(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.PriceAt(ctx, billing.UsageSourceAllocation, "h100-80gb.1x", "", t0.Add(-time.Second)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("before any price: %v", err)
	}
	p, err := q.PriceAt(ctx, billing.UsageSourceAllocation, "h100-80gb.1x", "", t0.Add(24*time.Hour))
	if err != nil || p.Version != 1 {
		t.Fatalf("day 1: %+v %v", p, err)
	}
	p, err = q.PriceAt(ctx, billing.UsageSourceAllocation, "h100-80gb.1x", "", t0.Add(72*time.Hour))
	if err != nil || p.Version != 2 || p.UnitPriceMicros != 2000 {
		t.Fatalf("day 3: %+v %v", p, err)
	}
	if err := store.ExecForTest(ctx, db, `UPDATE billing_prices SET unit_price_micros = 0 WHERE id = ?`, p.ID); err == nil {
		t.Fatal("a price version was edited in place")
	}
}

// The rating pass reads the queue of records without a charge, not every
// usage record ever stored: a record joins it when stored and leaves it
// when charged, by the rater (InsertCharge) or a posted charge
// (InsertLedgerEntry); parked records stay listed as unrated.
func TestRatingReadsTheUnratedQueue(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		now := time.Now().UTC()
		q := db.Queries()
		var recs []billing.UsageRecord
		for i := range 4 {
			recs = append(recs, usageRec(fmt.Sprintf("queue-%d-%s", i, newID()), 1, now))
		}
		if _, err := q.InsertUsageRecords(ctx, append(recs, recs[0])); err != nil { // a duplicate is queued once
			t.Fatal(err)
		}
		charge := func(u billing.UsageRecord) billing.LedgerEntry {
			return billing.LedgerEntry{ID: newID(), OrgID: "o1", ProjectID: "p1", EntryType: billing.EntryCharge, UsageRecordID: u.ID,
				UsageSource: u.UsageSource, UsageUnit: "tokens", Quantity: 1, PerQuantity: 1, Currency: "USD", UsageTime: now,
				CreatedBy: "system:billing", CreatedAt: now}
		}
		if ok, err := q.InsertCharge(ctx, charge(recs[0])); err != nil || !ok {
			t.Fatalf("charge: %v %v", ok, err)
		}
		noErr(t, "posted charge", q.InsertLedgerEntry(ctx, charge(recs[1])))
		if _, err := q.ParkUsage(ctx, billing.ParkedUsage{UsageRecordID: recs[3].ID, OrgID: "o1", ProjectID: "p1", Reason: "r", ParkedAt: now}); err != nil {
			t.Fatal(err)
		}
		ids := func(us []billing.UsageRecord) []string {
			var out []string
			for _, u := range us {
				out = append(out, u.ID)
			}
			return out
		}
		got, next, err := q.UnratedUsage(ctx, "", 100)
		noErr(t, "unrated", err)
		same(t, "to rate", ids(got), []string{recs[2].ID})
		if next != "" {
			t.Errorf("the queue read to its end gave cursor %q", next)
		}
		// A window at a time: one entry per window, the parked one's
		// window empty but not the end.
		var windows [][]string
		for after := ""; ; {
			got, next, err := q.UnratedUsage(ctx, after, 1)
			noErr(t, "unrated window", err)
			windows = append(windows, ids(got))
			if next == "" {
				break
			}
			if next <= after {
				t.Fatalf("cursor %q does not move past %q", next, after)
			}
			after = next
		}
		var seen []string
		for _, w := range windows {
			seen = append(seen, w...)
		}
		same(t, "to rate, one window at a time", seen, []string{recs[2].ID})
		if len(windows) < 2 {
			t.Errorf("windows of one entry over a queue of two: %v", windows)
		}
		rows, _, err := q.ListUnratedUsage(ctx, store.Page{Limit: 100})
		noErr(t, "list unrated", err)
		var listed []billing.UsageRecord
		for _, r := range rows {
			listed = append(listed, r.Record)
		}
		want := []string{recs[2].ID, recs[3].ID}
		if want[0] > want[1] {
			want[0], want[1] = want[1], want[0]
		}
		same(t, "listed unrated", ids(listed), want)
		var queued int
		noErr(t, "queue", store.QueryRowForTest(ctx, db, `SELECT COUNT(*) FROM usage_unrated`, &queued))
		if queued != 2 {
			t.Errorf("%d records queued, want the 2 without a charge", queued)
		}
	})
}

// BenchmarkRatingReadAfterHistory is one rating pass's read (UnratedUsage
// until it runs dry, as billing.Rate reads) on a store holding 50,000
// charged usage records and 10 to rate: what every replica does every
// minute once a platform has history.
func BenchmarkRatingReadAfterHistory(b *testing.B) { benchRatingRead(b, 50_000, 0, 10) }

// BenchmarkRatingReadWithParked is the same pass with 20,000 parked records,
// which stay in the rating queue, and 10 to rate.
func BenchmarkRatingReadWithParked(b *testing.B) { benchRatingRead(b, 0, 20_000, 10) }

// BenchmarkRatingReadWaitingForPrice is the same pass with 20,000 records
// waiting for a price (unparked, uncharged: every pass reads them all, in
// batches), which should be read once per pass, not once per batch.
func BenchmarkRatingReadWaitingForPrice(b *testing.B) { benchRatingRead(b, 0, 0, 20_000) }

func benchRatingRead(b *testing.B, history, parked, pending int) {
	storetest.EachDialect(b, func(b *testing.B, d store.Dialect) {
		db := storetest.Open(b, d)
		ctx := context.Background()
		now := time.Now().UTC()
		err := db.InTx(ctx, func(q *store.Queries) error {
			var recs []billing.UsageRecord
			for i := range history + parked + pending {
				recs = append(recs, usageRec(fmt.Sprintf("hist-%d", i), 1, now))
			}
			if _, err := q.InsertUsageRecords(ctx, recs); err != nil {
				return err
			}
			for _, u := range recs[:history] {
				if _, err := q.InsertCharge(ctx, billing.LedgerEntry{ID: newID(), OrgID: "o1", ProjectID: "p1", EntryType: billing.EntryCharge,
					UsageRecordID: u.ID, UsageSource: u.UsageSource, UsageUnit: "tokens", Quantity: 1, PerQuantity: 1, Currency: "USD",
					UsageTime: now, CreatedBy: "system:billing", CreatedAt: now}); err != nil {
					return err
				}
			}
			for _, u := range recs[history : history+parked] {
				if _, err := q.ParkUsage(ctx, billing.ParkedUsage{UsageRecordID: u.ID, OrgID: "o1", ProjectID: "p1",
					Reason: billing.UnratedAmountOverflow, ParkedAt: now}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		// As autovacuum would have by the time history is this long.
		if err := store.ExecForTest(ctx, db, `ANALYZE`); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			if n := ratingPass(b, db.Queries()); n != pending {
				b.Fatalf("read %d records to rate, want %d", n, pending)
			}
		}
	})
}

// ratingPass reads the rating queue to its end as billing.Rate does (a
// window of 5,000 entries at a time) and reports how many records it got
// to rate.
func ratingPass(tb testing.TB, q *store.Queries) int {
	after, n := "", 0
	for {
		recs, next, err := q.UnratedUsage(context.Background(), after, 5000)
		if err != nil {
			tb.Fatal(err)
		}
		n += len(recs)
		if next == "" {
			return n
		}
		after = next
	}
}
