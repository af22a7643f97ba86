package server_test

import (
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
