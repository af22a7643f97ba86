package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

var _ iam.LoginFailureStore = (*Queries)(nil)

// LoginFailures returns account's failed sign-ins and the time of the last.
func (q *Queries) LoginFailures(ctx context.Context, account string) (int, time.Time, error) {
	var n int
	var last int64
	err := scanOne(q.queryRow(ctx, `SELECT failures, last_failure_us FROM login_failures WHERE account = ?`, account).Scan(&n, &last))
	if errors.Is(err, ErrNotFound) {
		return 0, time.Time{}, nil
	}
	if err != nil {
		return 0, time.Time{}, err
	}
	return n, time.UnixMicro(last).UTC(), nil
}

// loginLapseSQL is iam.LoginFailuresLapse of login_failures.failures, in
// microseconds, as SQL: a CASE with one arm per count whose lapse differs
// from the next count's, up to the count where the back-off reaches its
// cap. Written from the domain's own function, so the one statement that
// records a failure judges lapses as the domain does.
var loginLapseSQL = sync.OnceValue(func() string {
	var b strings.Builder
	b.WriteString("CASE")
	for n := 0; n < 64; n++ {
		lapse := iam.LoginFailuresLapse(n)
		if lapse == iam.LoginFailuresLapse(n+1) && iam.LoginBackoff(n) == iam.LoginMaxBackoff {
			fmt.Fprintf(&b, " ELSE %d END", lapse.Microseconds())
			return b.String()
		}
		if lapse != iam.LoginFailuresLapse(n+1) {
			fmt.Fprintf(&b, " WHEN login_failures.failures <= %d THEN %d", n, lapse.Microseconds())
		}
	}
	panic("store: iam.LoginBackoff never reaches iam.LoginMaxBackoff")
})

// loginBackoffSQL is iam.LoginBackoff of login_failures.failures, in
// microseconds, as SQL, for the counts past iam.LoginFreeFailures (below
// it there is no back-off, and the caller does not ask): one arm per count
// up to the cap, written from the domain's own function as loginLapseSQL is.
var loginBackoffSQL = sync.OnceValue(func() string {
	var b strings.Builder
	b.WriteString("CASE")
	for n := iam.LoginFreeFailures; n < 64; n++ {
		backoff := iam.LoginBackoff(n)
		if backoff == iam.LoginMaxBackoff {
			fmt.Fprintf(&b, " ELSE %d END", backoff.Microseconds())
			return b.String()
		}
		fmt.Fprintf(&b, " WHEN login_failures.failures <= %d THEN %d", n, backoff.Microseconds())
	}
	panic("store: iam.LoginBackoff never reaches iam.LoginMaxBackoff")
})

// CountLoginAttempt counts an attempt on account at at as a failure, in
// one conditional upsert, unless the account's back-off runs at at; it
// returns the new count, or ok false when the attempt is refused (and
// nothing was written). The check and the count are one statement, so
// attempts made at once, on any number of replicas, get exactly the budget
// that was left (iam.LoginFailureStore). Times are whole microseconds so
// that both dialects do the lapse arithmetic alike.
func (q *Queries) CountLoginAttempt(ctx context.Context, account string, at time.Time) (int, bool, error) {
	if err := storage.CheckTime("at", at); err != nil {
		return 0, false, err
	}
	// Refused: the failures have not lapsed (implied: the back-off is
	// shorter than the lapse), they use up the free ones, and the back-off
	// of their count has not run since the last. A refused attempt leaves
	// the row as it is: ON CONFLICT DO UPDATE ... WHERE false returns no row.
	var n int
	err := scanOne(q.queryRow(ctx, fmt.Sprintf(`INSERT INTO login_failures (account, failures, last_failure_us) VALUES (?, 1, ?)
		ON CONFLICT (account) DO UPDATE SET
			failures = CASE WHEN excluded.last_failure_us - login_failures.last_failure_us > %s
				THEN 1 ELSE login_failures.failures + 1 END,
			last_failure_us = CASE WHEN excluded.last_failure_us > login_failures.last_failure_us
				THEN excluded.last_failure_us ELSE login_failures.last_failure_us END
		WHERE login_failures.failures < %d
			OR excluded.last_failure_us - login_failures.last_failure_us >= %s
		RETURNING failures`, loginLapseSQL(), iam.LoginFreeFailures, loginBackoffSQL()), account, at.UnixMicro()).Scan(&n))
	if errors.Is(err, ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return n, true, nil
}

// ClearLoginFailures forgets account's failures.
func (q *Queries) ClearLoginFailures(ctx context.Context, account string) error {
	_, err := q.exec(ctx, `DELETE FROM login_failures WHERE account = ?`, account)
	return err
}

// PruneLoginFailures deletes at most limit accounts whose last failure is
// before before, oldest first (login_failures_last finds them).
func (q *Queries) PruneLoginFailures(ctx context.Context, before time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, nil
	}
	if err := storage.CheckTime("before", before); err != nil {
		return 0, err
	}
	// The time condition is repeated outside the subquery: on PostgreSQL a
	// DELETE that waited on a row another transaction updated re-checks
	// only its own WHERE against the new row, and an attempt counted
	// meanwhile may have made that row live again.
	res, err := q.exec(ctx, fmt.Sprintf(`DELETE FROM login_failures WHERE last_failure_us < ? AND account IN
		(SELECT account FROM login_failures WHERE last_failure_us < ? ORDER BY last_failure_us LIMIT %d)`, limit),
		before.UnixMicro(), before.UnixMicro())
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
