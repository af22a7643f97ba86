package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// The sign-in throttle's shared count, through the port the IAM domain
// holds. Each dialect gets a database of its own: a prune sees the whole
// table.
func TestLoginFailuresConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		var q iam.LoginFailureStore = store.IAM(db).Read()
		record := func(account string, at time.Time) int {
			t.Helper()
			n, err := q.RecordLoginFailure(ctx, account, at)
			noErr(t, "record a failure", err)
			return n
		}
		read := func(account string) (int, time.Time) {
			t.Helper()
			n, last, err := q.LoginFailures(ctx, account)
			noErr(t, "read failures", err)
			return n, last
		}

		// None counted: 0 and the zero time.
		n, last := read("never")
		same(t, "failures of an account never failed", n, 0)
		same(t, "last failure of an account never failed", last.IsZero(), true)

		// Each failure counts; the last one's time comes back to the
		// microsecond.
		for i := 1; i <= 3; i++ {
			same(t, "count after a failure", record("ada", at(time.Duration(i)*time.Second)), i)
		}
		n, last = read("ada")
		same(t, "failures read back", n, 3)
		same(t, "last failure read back", last, at(3*time.Second))

		// A failure from a replica whose clock is behind counts, but does
		// not move the last failure back (that would shorten the back-off).
		same(t, "count after a failure stamped earlier", record("ada", at(time.Second)), 4)
		_, last = read("ada")
		same(t, "last failure after one stamped earlier", last, at(3*time.Second))

		// A success clears the account, and only it.
		record("bob", t0)
		noErr(t, "clear", q.ClearLoginFailures(ctx, "ada"))
		n, _ = read("ada")
		same(t, "failures after a clear", n, 0)
		n, _ = read("bob")
		same(t, "another account's failures after a clear", n, 1)
		noErr(t, "clear an account with none", q.ClearLoginFailures(ctx, "never"))

		// The earlier failures lapse as iam.LoginFailuresLapse says, for
		// every count up to past the back-off's cap: at the lapse they
		// still count, a microsecond later the count starts again.
		for count := 1; count <= iam.LoginFreeFailures+12; count++ {
			held, lapsed := fmt.Sprintf("held-%d", count), fmt.Sprintf("lapsed-%d", count)
			for range count {
				record(held, t0)
				record(lapsed, t0)
			}
			lapse := iam.LoginFailuresLapse(count)
			same(t, fmt.Sprintf("count after %d failures and their lapse", count), record(held, t0.Add(lapse)), count+1)
			same(t, fmt.Sprintf("count after %d failures and their lapse and 1µs", count), record(lapsed, t0.Add(lapse+time.Microsecond)), 1)
			_, last = read(lapsed)
			same(t, "last failure of a count started again", last, t0.Add(lapse+time.Microsecond))
		}

		// Failures recorded at once, as by replicas failing together, all
		// count: the upsert is one statement.
		const writers, each = 4, 10
		var wg sync.WaitGroup
		errs := make(chan error, writers*each)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if _, err := q.RecordLoginFailure(ctx, "raced", at(time.Duration(w*each+i)*time.Millisecond)); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("concurrent failure: %v", err)
		}
		n, _ = read("raced")
		same(t, "failures recorded concurrently", n, writers*each)
	})
}

// Pruning deletes the accounts whose last failure is before the cutoff,
// oldest first and at most the limit at a time, and keeps the others.
func TestLoginFailuresPruneConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		var q iam.LoginFailureStore = store.IAM(db).Read()
		for i, d := range []time.Duration{-3 * time.Hour, -2 * time.Hour, -time.Hour, 0, time.Hour} {
			_, err := q.RecordLoginFailure(ctx, fmt.Sprintf("acct-%d", i), at(d))
			noErr(t, "record", err)
		}
		left := func() []string {
			var out []string
			for i := range 5 {
				if n, _, err := q.LoginFailures(ctx, fmt.Sprintf("acct-%d", i)); err != nil {
					t.Fatal(err)
				} else if n > 0 {
					out = append(out, fmt.Sprintf("acct-%d", i))
				}
			}
			return out
		}
		n, err := q.PruneLoginFailures(ctx, t0, 2)
		noErr(t, "prune", err)
		same(t, "pruned with a limit of 2", n, int64(2))
		same(t, "left after the first prune (oldest go first)", left(), []string{"acct-2", "acct-3", "acct-4"})
		n, err = q.PruneLoginFailures(ctx, t0, 2)
		noErr(t, "second prune", err)
		same(t, "pruned the second time", n, int64(1))
		// The cutoff is exclusive: a failure at it is kept.
		n, err = q.PruneLoginFailures(ctx, t0, 2)
		noErr(t, "third prune", err)
		same(t, "pruned with nothing before the cutoff", n, int64(0))
		same(t, "left after the prunes", left(), []string{"acct-3", "acct-4"})
		n, err = q.PruneLoginFailures(ctx, at(2*time.Hour), 0)
		noErr(t, "prune with no limit", err)
		same(t, "pruned with a limit of 0", n, int64(0))
	})
}
