package httpapi_test

import (
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// The per-account lockout holds across replicas and restarts: wrong
// passwords spread over two replicas on one PostgreSQL add up, the next
// attempt is refused by either, and by a replica built afresh on the same
// database (what a restart leaves); a success on one clears the count for
// all. Unknown emails are refused the same way. Parallel attempts over
// both replicas get no more checks than the budget left.
func TestLoginLockoutIsSharedByReplicasAndRestarts(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Now().UTC().Truncate(time.Second))
	a, b := servertest.TwoReplicas(t, servertest.WithClock(clk))
	clk.Advance(time.Second) // past the second seeding's password reset, which cuts tokens issued at its instant
	b.Admin().Do("POST", "/api/v1/users", map[string]string{"email": "ada@example.com", "password": "long-enough-password"}).Want(t, 201)
	login := func(s *servertest.Server, email, pw string, want int) *servertest.Response {
		t.Helper()
		return s.Anonymous().Do("POST", "/api/v1/auth/login", map[string]string{"email": email, "password": pw}).Want(t, want)
	}
	refused := func(s *servertest.Server, email, pw, retryAfter string) {
		t.Helper()
		r := login(s, email, pw, 429)
		if r.ErrorCode() != "too_many_login_attempts" || r.Header.Get("Retry-After") != retryAfter {
			t.Fatalf("%s: %s %v, want too_many_login_attempts with Retry-After %s", email, r.Body, r.Header, retryAfter)
		}
	}
	replicas := []*servertest.Server{a, b}
	for _, email := range []string{"ada@example.com", "nobody@example.com"} {
		for i := range iam.LoginFreeFailures {
			login(replicas[i%2], email, "not-the-password", 401)
		}
		refused(a, email, "not-the-password", "1")
		refused(b, email, "not-the-password", "1")
	}
	// A replica started afresh on the same database knows the count.
	c := servertest.Start(t, store.Postgres, servertest.WithClock(clk), func(cfg *config.Config) {
		cfg.DatabaseURL, cfg.Events.NATSURL = a.App.Config.DatabaseURL, a.App.Config.Events.NATSURL
	})
	refused(c, "ada@example.com", "long-enough-password", "1")
	refused(c, "nobody@example.com", "not-the-password", "1")
	// The back-off the replicas share grows with a failure on any of them.
	clk.Advance(time.Second)
	login(c, "ada@example.com", "not-the-password", 401)
	refused(a, "ada@example.com", "long-enough-password", "2")
	// A success on one replica clears the count for the others: each
	// gets the full budget again.
	clk.Advance(2 * time.Second)
	login(a, "ada@example.com", "long-enough-password", 200)
	for i := range iam.LoginFreeFailures {
		login([]*servertest.Server{b, c}[i%2], "ada@example.com", "not-the-password", 401)
	}
	refused(b, "ada@example.com", "not-the-password", "1")
	// Attempts made at once, spread over the replicas, get only the budget
	// left: each is counted before its check, in one statement.
	const email, parallel = "grace@example.com", 6
	for i := range iam.LoginFreeFailures - 1 {
		login(replicas[i%2], email, "not-the-password", 401)
	}
	statuses := make([]int, parallel)
	codes := make([]string, parallel)
	var wg sync.WaitGroup
	for i := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := replicas[i%2].Anonymous().Do("POST", "/api/v1/auth/login", map[string]string{"email": email, "password": "not-the-password"})
			statuses[i], codes[i] = r.Status, r.ErrorCode()
		}()
	}
	wg.Wait()
	checked := 0
	for i, status := range statuses {
		switch {
		case status == 401:
			checked++
		case status == 429 && codes[i] == "too_many_login_attempts":
		default:
			t.Fatalf("attempt at once: %d %s", status, codes[i])
		}
	}
	if checked != 1 {
		t.Fatalf("%d of %d attempts at once over two replicas were checked, want 1 (the budget left): %v", checked, parallel, statuses)
	}
}
