package iam

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// Per-account sign-in throttling. The per-address limiter in httpapi slows
// one client down; this slows down guessing one account's password from many
// addresses. After LoginFreeFailures wrong passwords for one email within
// LoginFailureWindow, every further attempt for that email is refused until a
// back-off has passed, doubling with each failure up to LoginMaxBackoff. The
// refusal is the same for unknown emails, so it reveals nothing about which
// accounts exist.
//
// Every attempt is counted as a failure before its password is checked,
// in the database (LoginFailureStore), keyed by a keyed hash of the email:
// one conditional upsert either counts the attempt or refuses it, so the
// check against the budget and the count are one step on whichever replica
// an attempt reaches, parallel attempts on any number of replicas get
// exactly the budget that was left, and a restart forgets nothing. A right
// password then clears the count; a wrong one has nothing left to write.
// Nothing about the attempts is kept in a replica's memory.
//
// Failing closed. An attempt the database could not count gets no check:
// it is refused with 503 login_throttle_unavailable, to be retried. Once an
// attempt is counted, its check was paid for, so a success whose clear
// fails is answered all the same (the count it leaves only refuses sooner).
// An attempt that reaches no verdict (an error before the password check)
// stays counted: that errs toward refusing.
const (
	LoginFreeFailures  = 5
	LoginFailureWindow = 15 * time.Minute
	LoginBaseBackoff   = time.Second
	LoginMaxBackoff    = 15 * time.Minute
	// loginPruneBatch is how many lapsed accounts each failed sign-in
	// deletes. Pruning on write rather than in a periodic job: rows are
	// only ever added by an attempt, at most one each, and a success takes
	// its own away, so a failure that takes away up to two lapsed ones
	// keeps the table from growing with failures long past, with no job to
	// run, elect a leader for or wait on. What a quiet spell leaves
	// (hashes, never emails) waits for the next failures, which take it
	// away two at a time.
	loginPruneBatch = 2
	// loginRetrySeconds is the Retry-After of a sign-in refused because
	// the database did not answer the throttle.
	loginRetrySeconds = 2
	// loginClearTimeout bounds clearing the failures once the right
	// password was checked.
	loginClearTimeout = 10 * time.Second
)

// LoginBackoff is how long after the last of count failures the next attempt
// must wait.
func LoginBackoff(count int) time.Duration {
	over := count - LoginFreeFailures
	if over < 0 {
		return 0
	}
	d := float64(LoginBaseBackoff) * math.Pow(2, float64(over))
	if d > float64(LoginMaxBackoff) {
		return LoginMaxBackoff
	}
	return time.Duration(d)
}

// LoginFailuresLapse is how long after the last of count failures they are
// old news: the account starts afresh, as if it had none. Every back-off has
// run out by then, and the window has passed since the last failure.
func LoginFailuresLapse(count int) time.Duration { return LoginFailureWindow + LoginBackoff(count) }

// loginLapsedBefore is the last-failure time before which every account's
// failures have lapsed, whatever their count: what may be pruned.
func loginLapsedBefore(now time.Time) time.Time {
	return now.Add(-(LoginFailureWindow + LoginMaxBackoff))
}

// loginAccount is the account email's failures are counted under: a keyed
// hash, so that the table is no list of the addresses people tried and a
// guessed address cannot be looked up in it without the server's key.
func (s *Service) loginAccount(email string) (string, error) {
	if len(s.LoginKey) == 0 {
		return "", &errdefs.Error{Kind: errdefs.KindInternal, Code: "login_not_configured",
			Message: "sign-in is not configured on this server (it has no login throttle key); report this to the operator"}
	}
	mac := hmac.New(sha256.New, s.LoginKey)
	mac.Write([]byte(email))
	return hex.EncodeToString(mac.Sum(nil)), nil
}

// errLoginThrottleUnavailable is the refusal of a sign-in whose throttle
// attempt the database could not count.
func errLoginThrottleUnavailable(cause error) error {
	return &errdefs.Error{Kind: errdefs.KindUnavailable, Code: "login_throttle_unavailable",
		Message: "sign-in is unavailable for a moment: the server could not count this attempt; retry in a few seconds",
		Details: map[string]any{errdefs.RetryAfterDetail: loginRetrySeconds}, Cause: cause}
}

// beginLogin counts an attempt on account at now, before its password is
// checked, or refuses it: 429 while the account's back-off runs, 503 when
// the database could not count it, ctx's error when the client hung up.
func beginLogin(ctx context.Context, q LoginFailureStore, account string, now time.Time) error {
	_, counted, err := q.CountLoginAttempt(ctx, account, now)
	if err == nil && counted {
		return nil
	}
	if err == nil {
		// Refused. The count is read again only for the Retry-After.
		var count int
		var last time.Time
		if count, last, err = q.LoginFailures(ctx, account); err == nil {
			return loginRefusal(count, last, now)
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return errLoginThrottleUnavailable(err)
}

// loginRefusal is the 429 of an attempt refused at now, with count failures
// read back, the last at last. The row may have moved since the refusal
// (cleared by a success, stamped later by a replica whose clock is ahead):
// Retry-After is at least a second, never less.
func loginRefusal(count int, last time.Time, now time.Time) error {
	secs := 1
	if wait := last.Add(LoginBackoff(count)).Sub(now); count >= LoginFreeFailures && wait > time.Second {
		secs = int(math.Ceil(wait.Seconds()))
	}
	return errdefs.RateLimited("too_many_login_attempts", secs, nil,
		"too many failed sign-ins for this email; wait %ds and retry, or ask an admin to reset the password", secs)
}

// pruneLogins deletes a few accounts whose failures have lapsed
// (loginPruneBatch).
func pruneLogins(ctx context.Context, q LoginFailureStore, now time.Time) error {
	_, err := q.PruneLoginFailures(ctx, loginLapsedBefore(now), loginPruneBatch)
	return err
}

// clearLogins forgets account's failures after the right password, for
// every replica, even when the client has hung up: the token was earned.
func clearLogins(ctx context.Context, q LoginFailureStore, account string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loginClearTimeout)
	defer cancel()
	return q.ClearLoginFailures(ctx, account)
}
