package iam

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"sync"
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
// What is shared and what is not. The failures (their count and the time of
// the last one) live in the database (LoginFailureStore), keyed by a keyed
// hash of the email, so every replica refuses by the same count and a
// restart forgets nothing: the back-off is computed from that shared count
// on whichever replica an attempt reaches. The attempts in flight are this
// replica's own: an attempt takes its place before its password is checked
// (begin) and is settled after (failed, succeeded or release), so N parallel
// guesses reaching one replica get no more checks than N sequential ones.
// Another replica does not see those places, only the failures once they are
// recorded: parallel guesses spread over R replicas can get up to R times
// the checks the budget left, once; every failure among them is counted, so
// the back-off that follows is the one their total earns.
//
// A sign-in whose throttle step fails in the database gets no verdict: it is
// refused with 503 login_throttle_unavailable, to be retried. Reading the
// count fails closed (no unthrottled guess goes through), and a checked
// password whose failure cannot be recorded, or whose success cannot clear
// the count, is not answered either: otherwise a database that takes reads
// but not writes would answer every guess while counting none of them.
const (
	LoginFreeFailures  = 5
	LoginFailureWindow = 15 * time.Minute
	LoginBaseBackoff   = time.Second
	LoginMaxBackoff    = 15 * time.Minute
	// loginPruneBatch is how many lapsed accounts each recorded failure
	// deletes. Pruning on write rather than in a periodic job: rows are only
	// ever added by a failure, at most one each, so a failure that takes
	// away up to two lapsed ones keeps the table from growing with
	// failures long past, with no job to run, elect a leader for or wait
	// on. What a quiet spell leaves (hashes, never emails) waits for the
	// next failures, which take it away two at a time.
	loginPruneBatch = 2
	// loginMaxReads bounds how often begin reads the count again because
	// an attempt on this replica recorded a failure meanwhile.
	loginMaxReads = 3
	// loginRetrySeconds is the Retry-After of a sign-in refused because
	// the database did not answer the throttle.
	loginRetrySeconds = 2
	// loginSettleTimeout bounds recording or clearing failures once the
	// password was checked.
	loginSettleTimeout = 10 * time.Second
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

// loginThrottle is one replica's bookkeeping of the attempts in flight. An
// entry lives only while an attempt for its account is being checked or is
// in flight, so the table is bounded by the sign-ins this replica is
// serving, not by how many emails were ever tried.
type loginThrottle struct {
	mu       sync.Mutex
	accounts map[string]*loginEntry
}

type loginEntry struct {
	checking int // begins reading the shared count
	inflight int // attempts begun and not yet settled
	// failed counts the failures attempts on this replica recorded (or
	// tried to) while the entry lived: a begin that sees it move during
	// its read may have read the count before them.
	failed uint64
}

func (s *Service) throttle() *loginThrottle {
	s.throttleOnce.Do(func() { s.loginThrottle = &loginThrottle{accounts: map[string]*loginEntry{}} })
	return s.loginThrottle
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
// step the database did not take.
func errLoginThrottleUnavailable(cause error) error {
	return &errdefs.Error{Kind: errdefs.KindUnavailable, Code: "login_throttle_unavailable",
		Message: "sign-in is unavailable for a moment: the server could not read or record failed sign-ins; retry in a few seconds",
		Details: map[string]any{errdefs.RetryAfterDetail: loginRetrySeconds}, Cause: cause}
}

// loginAttempt is one sign-in's place in the throttle, from begin until it
// is settled.
type loginAttempt struct {
	t       *loginThrottle
	q       LoginFailureStore
	account string
	e       *loginEntry
	settled bool
}

// begin refuses an attempt for account while its back-off runs, or while the
// attempts already in flight on this replica use up what is left of the
// budget; otherwise it reserves a place for the attempt, atomically with the
// check against the shared count. The caller must settle the attempt (defer
// release).
func (t *loginThrottle) begin(ctx context.Context, q LoginFailureStore, account string, now time.Time) (*loginAttempt, error) {
	t.mu.Lock()
	e := t.accounts[account]
	if e == nil {
		e = &loginEntry{}
		t.accounts[account] = e
	}
	e.checking++
	t.mu.Unlock()
	for reads := 1; ; reads++ {
		t.mu.Lock()
		seen := e.failed
		t.mu.Unlock()
		count, last, err := q.LoginFailures(ctx, account)
		t.mu.Lock()
		if err != nil {
			e.checking--
			t.forgetIdle(account, e)
			t.mu.Unlock()
			return nil, errLoginThrottleUnavailable(err)
		}
		// A failure recorded here during the read may be missing from it,
		// and its attempt no longer holds a place: read again, and past
		// the bound count such failures on top of what was read (twice, at
		// worst, which only refuses sooner).
		if missed := e.failed - seen; missed > 0 {
			if reads < loginMaxReads {
				t.mu.Unlock()
				continue
			}
			count += int(missed)
			last = now
		}
		e.checking--
		refused := loginRefusal(count, last, e.inflight, now)
		if refused != nil {
			t.forgetIdle(account, e)
			t.mu.Unlock()
			return nil, refused
		}
		e.inflight++
		t.mu.Unlock()
		return &loginAttempt{t: t, q: q, account: account, e: e}, nil
	}
}

// loginRefusal is the 429 for an attempt when count failures, the last at
// last, are recorded and inflight attempts hold places here; nil when the
// attempt may go ahead.
func loginRefusal(count int, last time.Time, inflight int, now time.Time) error {
	if count > 0 && now.Sub(last) > LoginFailuresLapse(count) {
		count = 0 // the earlier failures are old news
	}
	var wait time.Duration
	switch {
	case count+inflight < LoginFreeFailures:
		return nil
	case inflight > 0:
		// The attempts in flight use up the budget: if they all fail,
		// this is the back-off that follows.
		wait = LoginBackoff(count + inflight)
	default:
		wait = last.Add(LoginBackoff(count)).Sub(now)
	}
	if wait <= 0 {
		return nil
	}
	secs := int(math.Ceil(wait.Seconds()))
	return errdefs.RateLimited("too_many_login_attempts", secs, nil,
		"too many failed sign-ins for this email; wait %ds and retry, or ask an admin to reset the password", secs)
}

// failed records a wrong password (or an unknown or disabled account) for
// every replica. An error means the failure may not be counted.
func (a *loginAttempt) failed(ctx context.Context, now time.Time) error {
	if a.settled {
		return nil
	}
	ctx, cancel := settleContext(ctx)
	defer cancel()
	_, err := a.q.RecordLoginFailure(ctx, a.account, now)
	// Counted even when the store said no: the failure may have been
	// recorded all the same, and over-counting only refuses sooner.
	a.settle(func(e *loginEntry) { e.failed++ })
	if err != nil {
		return errLoginThrottleUnavailable(err)
	}
	return nil
}

// settleContext is the request's context without its cancellation: a
// client that hangs up once its password was checked still has its
// failure counted.
func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), loginSettleTimeout)
}

// prune deletes a few accounts whose failures have lapsed (loginPruneBatch).
func (a *loginAttempt) prune(ctx context.Context, now time.Time) error {
	_, err := a.q.PruneLoginFailures(ctx, loginLapsedBefore(now), loginPruneBatch)
	return err
}

// succeeded clears the account's failures for every replica.
func (a *loginAttempt) succeeded(ctx context.Context) error {
	if a.settled {
		return nil
	}
	ctx, cancel := settleContext(ctx)
	defer cancel()
	err := a.q.ClearLoginFailures(ctx, a.account)
	a.settle(func(*loginEntry) {})
	if err != nil {
		return errLoginThrottleUnavailable(err)
	}
	return nil
}

// release ends an attempt that reached no verdict (an error before the
// password was checked, a panic): it neither counts nor clears. It does
// nothing once the attempt is settled, so callers defer it.
func (a *loginAttempt) release() { a.settle(func(*loginEntry) {}) }

func (a *loginAttempt) settle(verdict func(*loginEntry)) {
	t := a.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if a.settled {
		return
	}
	a.settled = true
	a.e.inflight--
	verdict(a.e)
	t.forgetIdle(a.account, a.e)
}

// forgetIdle drops e once no attempt for account is checked or in flight
// here (t.mu held).
func (t *loginThrottle) forgetIdle(account string, e *loginEntry) {
	if e.checking == 0 && e.inflight == 0 && t.accounts[account] == e {
		delete(t.accounts, account)
	}
}
