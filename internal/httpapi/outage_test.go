package httpapi_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A PostgreSQL restart under load: while the database is away every
// request is answered 503 unavailable with Retry-After — never 500 — and
// every change that was acknowledged is there afterwards. The database is
// a private server of this test (the shared one serves other packages).
func TestDatabaseRestartUnderLoadAnswers503(t *testing.T) {
	t.Parallel()
	storetest.PostgresURL(t) // runs where the PostgreSQL tests run; fails under CI without it
	pg := storetest.StartPostgres(t)
	s := servertest.Start(t, store.Postgres, func(c *config.Config) { c.DatabaseURL = pg.URL() })
	admin := s.Admin()

	var (
		stop     atomic.Bool
		mu       sync.Mutex
		statuses = map[int]int{}
		acked    []string
		bad      []string
		wg       sync.WaitGroup
	)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				slug := fmt.Sprintf("outage-%d-%d", w, i)
				r := admin.Do("POST", "/api/v1/orgs", map[string]string{"slug": slug, "name": slug})
				mu.Lock()
				statuses[r.Status]++
				switch {
				case r.Status == 201:
					acked = append(acked, r.String("id"))
				case r.Status == 503 && (r.ErrorCode() != "unavailable" || r.Header.Get("Retry-After") == ""):
					bad = append(bad, fmt.Sprintf("503 without code/Retry-After: %s %v", r.Body, r.Header))
				case r.Status >= 500 && r.Status != 503:
					bad = append(bad, fmt.Sprintf("%d: %s", r.Status, r.Body))
				}
				mu.Unlock()
				if r.Status == 503 {
					time.Sleep(20 * time.Millisecond) // a client backing off, shorter than Retry-After to keep load on
				}
			}
		}()
	}
	waitFor := func(what string, ok func() bool) {
		deadline := time.Now().Add(60 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	count := func(status int) func() int {
		return func() int { mu.Lock(); defer mu.Unlock(); return statuses[status] }
	}
	waitFor("load before the restart", func() bool { return count(201)() >= 20 })
	pg.Stop()
	waitFor("503s while the database is down", func() bool { return count(503)() >= 20 })
	pg.Start()
	before := count(201)()
	waitFor("acknowledged changes after the restart", func() bool { return count(201)() >= before+20 })
	stop.Store(true)
	wg.Wait()

	t.Logf("statuses: %v", statuses)
	for _, b := range bad {
		t.Error(b)
	}
	for _, id := range acked {
		if r := admin.Do("GET", "/api/v1/orgs/"+id, nil); r.Status != 200 {
			t.Errorf("acknowledged org %s lost: %d %s", id, r.Status, r.Body)
		}
	}
}
