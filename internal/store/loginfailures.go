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

// RecordLoginFailure counts one failure of account at at, in one upsert:
// two replicas recording at once both count, and failures that had lapsed
// by at start the count again (iam.LoginFailureStore). Times are whole
// microseconds so that both dialects do the lapse arithmetic alike.
func (q *Queries) RecordLoginFailure(ctx context.Context, account string, at time.Time) (int, error) {
	if err := storage.CheckTime("at", at); err != nil {
		return 0, err
	}
	var n int
	err := q.queryRow(ctx, `INSERT INTO login_failures (account, failures, last_failure_us) VALUES (?, 1, ?)
		ON CONFLICT (account) DO UPDATE SET
			failures = CASE WHEN excluded.last_failure_us - login_failures.last_failure_us > `+loginLapseSQL()+`
				THEN 1 ELSE login_failures.failures + 1 END,
			last_failure_us = CASE WHEN excluded.last_failure_us > login_failures.last_failure_us
				THEN excluded.last_failure_us ELSE login_failures.last_failure_us END
		RETURNING failures`, account, at.UnixMicro()).Scan(&n)
	return n, mapErr(err)
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
	res, err := q.exec(ctx, fmt.Sprintf(`DELETE FROM login_failures WHERE account IN
		(SELECT account FROM login_failures WHERE last_failure_us < ? ORDER BY last_failure_us LIMIT %d)`, limit), before.UnixMicro())
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
