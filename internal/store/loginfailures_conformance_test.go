package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// loginFailures is the sign-in throttle's port on db, with helpers that
// fail the test on a store error.
type loginFailures struct {
	t *testing.T
	q iam.LoginFailureStore
}

// count is one attempt on account at at: its new count, or 0 when refused.
func (l loginFailures) count(account string, at time.Time) int {
	l.t.Helper()
	n, ok, err := l.q.CountLoginAttempt(context.Background(), account, at)
	noErr(l.t, "count an attempt", err)
	if !ok {
		return 0
	}
	return n
}

func (l loginFailures) read(account string) (int, time.Time) {
	l.t.Helper()
	n, last, err := l.q.LoginFailures(context.Background(), account)
	noErr(l.t, "read failures", err)
	return n, last
}

// fail brings account to n failures, the last at last, each attempt
// waiting out the back-off of the one before and none lapsing.
func (l loginFailures) fail(account string, n int, last time.Time) {
	l.t.Helper()
	start := last
	for i := 1; i < n; i++ {
		start = start.Add(-iam.LoginBackoff(i))
	}
	for i, at := 1, start; i <= n; i++ {
		same(l.t, fmt.Sprintf("count of attempt %d on %s", i, account), l.count(account, at), i)
		at = at.Add(iam.LoginBackoff(i))
	}
	_, got := l.read(account)
	same(l.t, "last failure after the attempts", got, last)
}

// The sign-in throttle's shared count, through the port the IAM domain
// holds. Each dialect gets a database of its own: a prune sees the whole
// table.
func TestLoginFailuresConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		l := loginFailures{t: t, q: store.IAM(db).Read()}

		// None counted: 0 and the zero time.
		n, last := l.read("never")
		same(t, "failures of an account never failed", n, 0)
		same(t, "last failure of an account never failed", last.IsZero(), true)

		// Each attempt counts, up to the free ones even at one instant;
		// the last one's time comes back to the microsecond.
		for i := 1; i <= iam.LoginFreeFailures; i++ {
			same(t, "count after an attempt", l.count("ada", t0), i)
		}
		n, last = l.read("ada")
		same(t, "failures read back", n, iam.LoginFreeFailures)
		same(t, "last failure read back", last, t0)

		// Past the budget an attempt is refused until the back-off has run
		// since the last, and a refused attempt writes nothing.
		backoff := iam.LoginBackoff(iam.LoginFreeFailures)
		same(t, "count of an attempt at the budget", l.count("ada", t0), 0)
		same(t, "count of an attempt 1µs before the back-off ends", l.count("ada", t0.Add(backoff-time.Microsecond)), 0)
		n, last = l.read("ada")
		same(t, "failures after refusals", n, iam.LoginFreeFailures)
		same(t, "last failure after refusals", last, t0)
		same(t, "count of the attempt the back-off allows", l.count("ada", t0.Add(backoff)), iam.LoginFreeFailures+1)
		same(t, "count of an attempt beside it", l.count("ada", t0.Add(backoff)), 0)
		next := t0.Add(backoff + iam.LoginBackoff(iam.LoginFreeFailures+1))
		same(t, "count after the doubled back-off", l.count("ada", next), iam.LoginFreeFailures+2)

		// An attempt from a replica whose clock is behind counts while the
		// budget lasts, but does not move the last failure back (that would
		// shorten the back-off); at the budget it is refused.
		l.count("behind", at(3*time.Second))
		same(t, "count of an attempt stamped earlier", l.count("behind", at(time.Second)), 2)
		_, last = l.read("behind")
		same(t, "last failure after one stamped earlier", last, at(3*time.Second))
		l.fail("late", iam.LoginFreeFailures, t0)
		same(t, "count of an attempt stamped before the last, at the budget", l.count("late", at(-time.Hour)), 0)

		// A success clears the account, and only it.
		l.count("bob", t0)
		noErr(t, "clear", l.q.ClearLoginFailures(ctx, "ada"))
		n, _ = l.read("ada")
		same(t, "failures after a clear", n, 0)
		n, _ = l.read("bob")
		same(t, "another account's failures after a clear", n, 1)
		noErr(t, "clear an account with none", l.q.ClearLoginFailures(ctx, "never"))
		same(t, "count after a clear", l.count("ada", next), 1)

		// The earlier failures lapse as iam.LoginFailuresLapse says, for
		// every count up to past the back-off's cap: at the lapse they
		// still count, a microsecond later the count starts again.
		for count := 1; count <= iam.LoginFreeFailures+12; count++ {
			held, lapsed := fmt.Sprintf("held-%d", count), fmt.Sprintf("lapsed-%d", count)
			l.fail(held, count, t0)
			l.fail(lapsed, count, t0)
			lapse := iam.LoginFailuresLapse(count)
			same(t, fmt.Sprintf("count after %d failures and their lapse", count), l.count(held, t0.Add(lapse)), count+1)
			same(t, fmt.Sprintf("count after %d failures and their lapse and 1µs", count), l.count(lapsed, t0.Add(lapse+time.Microsecond)), 1)
			_, last = l.read(lapsed)
			same(t, "last failure of a count started again", last, t0.Add(lapse+time.Microsecond))
		}
	})
}

// Attempts made at once, as by parallel guesses spread over replicas, get
// exactly the budget left: the check and the count are one statement.
func TestLoginAttemptsAtOnceGetTheBudgetConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		l := loginFailures{t: t, q: store.IAM(db).Read()}
		const parallel = 12
		race := func(account string, at time.Time) int {
			t.Helper()
			var counted atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, parallel)
			for range parallel {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, ok, err := l.q.CountLoginAttempt(context.Background(), account, at)
					if err != nil {
						errs <- err
					} else if ok {
						counted.Add(1)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("attempt at once: %v", err)
			}
			return int(counted.Load())
		}
		const failed = 2
		l.fail("ada", failed, t0)
		same(t, "attempts at once that were counted with budget left", race("ada", t0), iam.LoginFreeFailures-failed)
		n, _ := l.read("ada")
		same(t, "failures after attempts at once", n, iam.LoginFreeFailures)
		same(t, "attempts at once that were counted once the back-off ran", race("ada", t0.Add(iam.LoginBackoff(n))), 1)
		same(t, "attempts at once on an account never failed", race("new", t0), iam.LoginFreeFailures)
	})
}

// Pruning deletes the accounts whose last failure is before the cutoff,
// oldest first and at most the limit at a time, and keeps the others.
func TestLoginFailuresPruneConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		l := loginFailures{t: t, q: store.IAM(db).Read()}
		for i, d := range []time.Duration{-3 * time.Hour, -2 * time.Hour, -time.Hour, 0, time.Hour} {
			l.count(fmt.Sprintf("acct-%d", i), at(d))
		}
		left := func() []string {
			var out []string
			for i := range 5 {
				if n, _ := l.read(fmt.Sprintf("acct-%d", i)); n > 0 {
					out = append(out, fmt.Sprintf("acct-%d", i))
				}
			}
			return out
		}
		n, err := l.q.PruneLoginFailures(ctx, t0, 2)
		noErr(t, "prune", err)
		same(t, "pruned with a limit of 2", n, int64(2))
		same(t, "left after the first prune (oldest go first)", left(), []string{"acct-2", "acct-3", "acct-4"})
		// A lapsed account that got a new attempt is live again: kept.
		l.count("acct-2", t0)
		n, err = l.q.PruneLoginFailures(ctx, t0, 2)
		noErr(t, "second prune", err)
		same(t, "pruned with the lapsed account live again", n, int64(0))
		// The cutoff is exclusive: a failure at it is kept.
		same(t, "left after the prunes", left(), []string{"acct-2", "acct-3", "acct-4"})
		n, err = l.q.PruneLoginFailures(ctx, at(2*time.Hour), 0)
		noErr(t, "prune with no limit", err)
		same(t, "pruned with a limit of 0", n, int64(0))
	})
}

// On PostgreSQL a prune that picked a lapsed account, and waits on its row
// while an attempt makes it live again, keeps it: the DELETE re-checks the
// time against the row the attempt committed, not the one it picked.
func TestLoginFailuresPruneKeepsARowMadeLiveMeanwhile(t *testing.T) {
	db := storetest.Open(t, store.Postgres)
	ctx := context.Background()
	l := loginFailures{t: t, q: store.IAM(db).Read()}
	l.fail("stale", iam.LoginFreeFailures, at(-3*time.Hour))
	pruned := make(chan int64, 1)
	err := db.InTx(ctx, func(q *store.Queries) error {
		if n, ok, err := q.CountLoginAttempt(ctx, "stale", t0); err != nil || !ok || n != 1 {
			return fmt.Errorf("attempt on a lapsed account: %d, %v, %v; want counted as 1", n, ok, err)
		}
		go func() {
			n, err := l.q.PruneLoginFailures(ctx, t0, 2)
			if err != nil {
				t.Error(err)
			}
			pruned <- n
		}()
		// Commit only once the prune waits on the row this holds.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			waiters, err := store.LockWaitersForTest(ctx, db)
			if err != nil {
				return err
			}
			if waiters > 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the prune never waited on the row")
			}
		}
	})
	noErr(t, "attempt beside a prune", err)
	same(t, "pruned beside the attempt", <-pruned, int64(0))
	n, last := l.read("stale")
	same(t, "failures of the row made live", n, 1)
	same(t, "last failure of the row made live", last, t0)
}
