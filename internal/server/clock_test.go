package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// The server reads one clock: the services it builds stamp the manual
// clock's time, not the wall clock's, and the access tokens it issued
// expire when that clock moves past their lifetime.
func TestOneClock(t *testing.T) {
	at := time.Now().UTC().Truncate(time.Second).Add(48 * time.Hour)
	clk := clock.NewManual(at)
	s := servertest.Start(t, store.SQLite, servertest.WithClock(clk))
	admin := s.Admin()
	stamped := func(what, field string, r *servertest.Response, want time.Time) {
		t.Helper()
		if got, err := time.Parse(time.RFC3339Nano, r.String(field)); err != nil || !got.Equal(want) {
			t.Errorf("%s: %s %q, want the server's clock %s", what, field, r.String(field), want.Format(time.RFC3339))
		}
	}
	stamped("org (iam)", "created_at", admin.Do("POST", "/api/v1/orgs", map[string]string{"slug": "clocked", "name": "Clocked"}).Want(t, 201), at)
	stamped("price (billing)", "effective_from", admin.Do("POST", "/api/v1/admin/billing/prices",
		map[string]any{"usage_source": "allocation", "sku": "h100-80gb.1x", "unit_price_micros": 1}).Want(t, 201), at)
	stamped("join token (nodes)", "expires_at", admin.Do("POST", "/api/v1/admin/nodes/join-tokens",
		map[string]any{"description": "clock"}).Want(t, 201), at.Add(nodes.DefaultJoinTokenTTL))

	clk.Advance(s.App.Config.AccessTokenTTL + time.Minute)
	admin.Do("GET", "/api/v1/orgs", nil).Want(t, 401)
}

// The outbox is stamped and pruned by the server's clock: the relay marks
// events published at the clock's time, and the retention worker cuts at
// the clock's time less the retention, so the events go when that clock —
// not the wall clock — has moved past the retention.
func TestOneClockPrunesEvents(t *testing.T) {
	at := time.Now().UTC().Truncate(time.Second).Add(48 * time.Hour)
	clk := clock.NewManual(at)
	s := servertest.Start(t, store.SQLite, servertest.WithClock(clk))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, price := range []int{1, 2} { // each emits an event
		s.Admin().Do("POST", "/api/v1/admin/billing/prices",
			map[string]any{"usage_source": "allocation", "sku": "h100-80gb.1x", "unit_price_micros": price}).Want(t, 201)
	}
	q := s.App.DB.Queries()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left, err := q.UnpublishedEvents(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		oldest, newest, err := q.EventBounds(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 && oldest > 0 && newest > oldest {
			break // both prices' events sequenced and published
		}
		if time.Now().After(deadline) {
			t.Fatalf("events not sequenced and published: %d unpublished, positions %d..%d", len(left), oldest, newest)
		}
	}
	cleaner := s.App.EventCleaner()
	prune := func() (oldest, newest int64) {
		t.Helper()
		n := cleaner.Runs()
		cleaner.Kick()
		if err := cleaner.WaitRuns(ctx, n+1); err != nil {
			t.Fatal(err)
		}
		oldest, newest, err := q.EventBounds(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return oldest, newest
	}
	// An hour short of the retention on the server's clock (days past it
	// for events the wall clock would have stamped): nothing goes.
	retention := s.App.Config.Events.Retention
	clk.Advance(retention - time.Hour)
	if oldest, newest := prune(); oldest >= newest {
		t.Fatalf("pruned before the retention passed on the server's clock: oldest %d, newest %d", oldest, newest)
	}
	clk.Advance(time.Hour + time.Minute)
	if oldest, newest := prune(); oldest != newest {
		t.Fatalf("the server's clock is past the retention, yet oldest %d, newest %d: want only the newest left", oldest, newest)
	}
}
