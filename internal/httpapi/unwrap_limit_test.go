package httpapi_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// Registry-credential unwraps are limited per signed-in principal, refused
// ones included (each is a transaction and an audit row): past the burst
// the request is refused with 429 and Retry-After, nothing is written and
// the wrapping token is not consumed, so it unwraps once the wait is over;
// another principal keeps its own budget, whatever tokens the first sent.
func TestRegistryUnwrapRateLimit(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		// One unwrap every 4 s: the burst of 2 is spent well before any
		// refill, however slow the machine.
		s := servertest.Start(t, d, func(c *config.Config) { c.UnwrapRate, c.UnwrapBurst = 0.25, 2 })
		admin := s.Admin()
		_, stranger := s.NewUser(admin, "stranger@example.com")
		pi := admin.Do("POST", "/api/v1/projects/"+s.Creds.ProjectID+"/app-artifacts/publish-intents",
			map[string]any{"app_slug": "demo", "app_version": "1.0.0", "artifact_name": "runtime", "signature_required": false}).Want(t, 201)
		tok := wrapToken(pi)
		unwrapAs := func(c *servertest.Client, token string) *servertest.Response {
			return c.Do("POST", "/api/v1/apps/registry/unwrap", map[string]string{"wrapping_token": token})
		}
		unwrapRows := func() int {
			evs, _, err := s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{Action: "artifact.credentials.unwrap"}, store.Page{Limit: store.MaxPageLimit})
			if err != nil {
				t.Fatal(err)
			}
			return len(evs)
		}

		// Guessed tokens spend the budget as well as real ones.
		unwrapAs(admin, "guess-1").Want(t, 409)
		unwrapAs(admin, "guess-2").Want(t, 409)
		rows := unwrapRows()
		r := unwrapAs(admin, tok)
		wait, err := strconv.Atoi(r.Header.Get("Retry-After"))
		if r.Status != 429 || r.ErrorCode() != "unwrap_rate_limited" || err != nil || wait < 1 ||
			!strings.Contains(str(r, "error.message"), "the wrapping token still works") {
			t.Fatalf("an unwrap past a burst of 2: %d Retry-After %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
		}
		if n := unwrapRows(); n != rows {
			t.Fatalf("a refused unwrap wrote %d audit rows", n-rows)
		}
		// The stranger's budget is its own: a wrong token is answered as such.
		unwrapAs(stranger, "guess-3").Want(t, 409)

		time.Sleep(time.Duration(wait)*time.Second + 200*time.Millisecond)
		if r := unwrapAs(admin, tok); r.Status != 200 || r.String("username") == "" {
			t.Fatalf("the token after Retry-After: %d %s", r.Status, r.Body)
		}
	})
}
