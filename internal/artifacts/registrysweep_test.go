package artifacts_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A project whose recount does not finish within its own bound is put off
// to the documented retry, and the project due after it is recounted in
// the same pass; the slow one is recounted when its retry is due. A
// recount sharing the pass's deadline instead ran out of it and, on the
// expired context, could neither clear nor put the project off, so it led
// every pass and no project after it got its quota back.
func TestRegistryRecountOfASlowProjectHoldsUpNoOther(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		clk, q, s := recountFixture(t, db)
		idle := artifacts.RegistryHoldIdle(0)
		var slow atomic.Bool
		slow.Store(true)
		s.AttachRecountReader(time.Second, func(ctx context.Context, repos []string, _ int) (map[string]bool, error) {
			if slow.Load() && slices.Contains(repos, "slow/app") {
				<-ctx.Done() // storage that answers no sooner than the recount gives up
				return nil, ctx.Err()
			}
			return map[string]bool{}, nil
		})
		pass := func() {
			t.Helper()
			// The recount job's run is bounded; this one shorter than its 5
			// minutes, as each project's bound is shorter than 2.
			pctx, cancel := context.WithTimeout(ctx, 4*time.Second)
			defer cancel()
			if err := s.RecountRegistries(pctx); err != nil {
				t.Errorf("recount pass: %v", err)
			}
		}
		counted := func(p string) int64 { return registryCounted(t, q, p) }
		due := func(at time.Time) []string { return dueRecounts(t, q, at) }

		start := clk.Now()
		pass()
		if c := counted("fast"); c != 0 {
			t.Fatalf("after a pass whose first project's recount timed out, the next project still counts %d bytes; want 0", c)
		}
		if c := counted("slow"); c != 100 {
			t.Fatalf("the project whose recount timed out counts %d bytes; want 100 (nothing given back)", c)
		}
		if d := due(start.Add(idle - time.Second)); len(d) != 0 {
			t.Fatalf("due before the retry interval: %v; want none (the slow project put off, the fast one cleared)", d)
		}
		if d := due(start.Add(idle)); !slices.Equal(d, []string{"slow"}) {
			t.Fatalf("due after the retry interval: %v; want [slow]", d)
		}

		// Retried once due, it is recounted like any other.
		slow.Store(false)
		clk.Advance(idle)
		pass()
		if c := counted("slow"); c != 0 {
			t.Fatalf("after its retry, the slow project counts %d bytes; want 0", c)
		}
		if d := due(clk.Now().Add(24 * time.Hour)); len(d) != 0 {
			t.Fatalf("recounts left after the retry: %v", d)
		}
	})
}

// A pass that ends while a project is being recounted (the server
// stopping, or the run's own deadline) is not that project's failure: it
// stays due as it was, and leads the next pass.
func TestRegistryRecountCutShortByItsPassStaysDue(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		clk, q, s := recountFixture(t, db)
		pctx, stop := context.WithCancel(ctx)
		defer stop()
		s.AttachRecountReader(time.Second, func(ctx context.Context, repos []string, _ int) (map[string]bool, error) {
			stop() // the server stops while the first project is read
			<-ctx.Done()
			return nil, ctx.Err()
		})
		start := clk.Now()
		if err := s.RecountRegistries(pctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("a pass stopped during a recount answered %v; want context.Canceled", err)
		}
		if d := dueRecounts(t, q, start); !slices.Equal(d, []string{"slow", "fast"}) {
			t.Fatalf("due after a stopped pass: %v; want [slow fast], as before it", d)
		}
		if c := registryCounted(t, q, "slow") + registryCounted(t, q, "fast"); c != 200 {
			t.Fatalf("a stopped pass left %d bytes counted; want 200", c)
		}
	})
}

// A project is started only with its whole bound left in the pass: the
// one after a slow project, in a pass that has less than that left, is
// not started (and so not put off for failing), and stays due for the
// next pass, 10 minutes later, not the 2-hour retry. Each project's
// deadline used to be half of what was left of the pass, so the second
// project's fell short of its own bound and it was put off like a
// project whose storage failed.
func TestRegistryRecountLeavesDueWhatThePassHasNoTimeFor(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		clk, q, s := recountFixture(t, db)
		s.AttachRecountReader(time.Second, func(ctx context.Context, repos []string, _ int) (map[string]bool, error) {
			if slices.Contains(repos, "slow/app") {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			select { // well inside its own bound of a second
			case <-time.After(400 * time.Millisecond):
				return map[string]bool{}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		start := clk.Now()
		pctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		if err := s.RecountRegistries(pctx); err != nil {
			t.Fatalf("recount pass: %v", err)
		}
		if d := dueRecounts(t, q, start); !slices.Equal(d, []string{"fast"}) {
			t.Fatalf("due after a pass with no time left for the second project: %v; want [fast] (the slow one put off, the fast one left as it was)", d)
		}
		if c := registryCounted(t, q, "fast"); c != 100 {
			t.Fatalf("the project not started counts %d bytes; want 100", c)
		}
	})
}

// A recount pass that takes its whole bound reading manifests holds up
// no sweep of abandoned pushes (nor the other way round): they are two
// jobs, each with its own runs. When the recount shared the sweeper's
// run, the sweep waited for every recount before it.
func TestRegistryHoldSweepDoesNotWaitForARecount(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		// No deadline: a pass starts a project only with its whole bound
		// (a minute here) left.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, _, s := recountFixture(t, db)
		reading, release := make(chan struct{}, 1), make(chan struct{})
		s.AttachRecountReader(time.Minute, func(ctx context.Context, _ []string, _ int) (map[string]bool, error) {
			select {
			case reading <- struct{}{}:
			default:
			}
			select { // storage slow to answer, until the test lets it
			case <-release:
				return map[string]bool{}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		recounter, sweeper := s.RegistryRecounter(), s.RegistryHoldSweeper()
		if err := recounter.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer recounter.Stop()
		defer close(release)
		select {
		case <-reading:
		case <-time.After(30 * time.Second):
			t.Fatal("the recount job never read a project's manifests")
		}
		if err := sweeper.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer sweeper.Stop()
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		if err := sweeper.WaitRuns(wctx, 1); err != nil {
			t.Fatalf("the hold sweeper finished no run while a recount was reading: %v", err)
		}
		if n := recounter.Runs(); n != 0 {
			t.Fatalf("the recount finished %d runs while its read was held; want 0", n)
		}
	})
}

// A database failure in the middle of a project's recount (a failover, a
// lost connection: the store answers storage.ErrUnavailable) is not the
// project's: unlike its storage failing or its own deadline, it leaves
// the project due, not put off for 2 hours 10 minutes, and the next pass,
// the database back, recounts it. The pass goes on with the next project.
func TestRegistryRecountAfterADatabaseFailureStaysDue(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		clk, q, _ := recountFixture(t, db)
		flaky := &flakyQuotaStore{Store: store.Artifacts(db)}
		s := artifacts.New(artifacts.Deps{Store: flaky, Now: clk.Now})
		var failed atomic.Bool
		s.AttachRecountReader(time.Second, func(ctx context.Context, repos []string, _ int) (map[string]bool, error) {
			if slices.Contains(repos, "slow/app") && failed.CompareAndSwap(false, true) {
				// The database goes away while the registry's storage is
				// read, once: the recount's write, next, fails.
				flaky.failNextLock.Store(true)
			}
			return map[string]bool{}, nil
		})
		start := clk.Now()
		err := s.RecountRegistries(ctx)
		if flaky.failNextLock.Load() {
			t.Fatal("the recount never locked the project's quota: no database failure was injected")
		}
		if d := dueRecounts(t, q, start); !slices.Equal(d, []string{"slow"}) {
			t.Fatalf("due right after a pass whose recount of slow met a database failure: %v; want [slow] (left due for the next pass, not put off; fast recounted)", d)
		}
		if !errors.Is(err, storage.ErrUnavailable) {
			t.Fatalf("a pass whose recount met a database failure answered %v; want storage.ErrUnavailable", err)
		}
		if c := registryCounted(t, q, "slow"); c != 100 {
			t.Fatalf("the project whose recount met a database failure counts %d bytes; want 100 (nothing given back)", c)
		}
		if c := registryCounted(t, q, "fast"); c != 0 {
			t.Fatalf("the project after the one that met a database failure counts %d bytes; want 0", c)
		}

		// The database back, the next pass (10 minutes later, far short of
		// the 2-hour retry) recounts it.
		clk.Advance(10 * time.Minute)
		if err := s.RecountRegistries(ctx); err != nil {
			t.Fatalf("recount pass with the database back: %v", err)
		}
		if c := registryCounted(t, q, "slow"); c != 0 {
			t.Fatalf("after the next pass, the project counts %d bytes; want 0", c)
		}
		if d := dueRecounts(t, q, clk.Now().Add(24*time.Hour)); len(d) != 0 {
			t.Fatalf("recounts left after the next pass: %v", d)
		}
	})
}

// flakyQuotaStore is the artifacts store on a real database whose next
// lock of a project's registry quota, once failNextLock is set, fails as
// the store does when the database is unreachable.
type flakyQuotaStore struct {
	artifacts.Store
	failNextLock atomic.Bool
}

func (f *flakyQuotaStore) InTx(ctx context.Context, fn func(q artifacts.Queries) error) error {
	return f.Store.InTx(ctx, func(q artifacts.Queries) error { return fn(flakyQuotaQueries{Queries: q, f: f}) })
}

type flakyQuotaQueries struct {
	artifacts.Queries
	f *flakyQuotaStore
}

func (q flakyQuotaQueries) LockRegistryQuota(ctx context.Context, projectID string) error {
	if q.f.failNextLock.CompareAndSwap(true, false) {
		return fmt.Errorf("lock registry quota of %s: connection lost: %w", projectID, storage.ErrUnavailable)
	}
	return q.Queries.LockRegistryQuota(ctx, projectID)
}

// recountFixture is an artifacts service on db and a manual clock, with
// two projects due for a recount, "slow" first then "fast", each counting
// one 100-byte blob (repository "<project>/app") that no manifest
// references, last used long enough ago to be given back.
func recountFixture(t *testing.T, db *store.DB) (*clock.Manual, *store.Queries, *artifacts.Service) {
	t.Helper()
	ctx := context.Background()
	clk := clock.NewManual(time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC))
	s := artifacts.New(artifacts.Deps{Store: store.Artifacts(db), Now: clk.Now})
	q := db.Queries()
	unused := clk.Now().Add(-artifacts.RegistryHoldIdle(0) - time.Hour)
	for i, p := range []string{"slow", "fast"} {
		b := artifacts.RegistryBlob{ProjectID: p, Digest: "sha256:" + p, SizeBytes: 100, Repository: p + "/app", CreatedAt: unused, UsedAt: unused}
		if err := q.InsertRegistryBlob(ctx, b); err != nil {
			t.Fatal(err)
		}
		if err := q.ScheduleRegistryRecount(ctx, p, clk.Now().Add(time.Duration(i-2)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	return clk, q, s
}

func registryCounted(t *testing.T, q *store.Queries, project string) int64 {
	t.Helper()
	c, _, err := q.RegistryUsage(context.Background(), project)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dueRecounts(t *testing.T, q *store.Queries, at time.Time) []string {
	t.Helper()
	d, err := q.DueRegistryRecounts(context.Background(), at, 10)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
