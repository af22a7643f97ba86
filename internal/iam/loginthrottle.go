package iam

import (
	"container/list"
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
// accounts exist. State lives in memory on each replica: a restart or another
// replica starts afresh, which bounds an attacker's rate by replicas, not
// removes the bound.
//
// An attempt takes its place before its password is checked (begin) and is
// settled after (failed, succeeded or release): attempts in flight count
// against the budget, so N parallel guesses get no more checks than N
// sequential ones.
const (
	LoginFreeFailures  = 5
	LoginFailureWindow = 15 * time.Minute
	LoginBaseBackoff   = time.Second
	LoginMaxBackoff    = 15 * time.Minute
	// loginMaxTracked bounds memory: at most this many emails are tracked
	// (see track for which one is forgotten past it).
	loginMaxTracked = 100_000
)

type loginThrottle struct {
	mu       sync.Mutex
	accounts map[string]*loginFailures
	// order holds the tracked entries, least recently touched (reserved
	// or failed) first: stale entries are swept from its front, and the
	// front one is forgotten when the table is full.
	order *list.List
	// examined counts the entries sweeps looked at: the work tracking a
	// new email costs (tests bound it).
	examined int
}

type loginFailures struct {
	email    string
	count    int
	last     time.Time // of the last failure
	inflight int       // attempts begun and not yet settled
	elem     *list.Element
}

func (s *Service) throttle() *loginThrottle {
	s.throttleOnce.Do(func() { s.loginThrottle = &loginThrottle{accounts: map[string]*loginFailures{}} })
	return s.loginThrottle
}

// backoff is how long after the last failure the next attempt must wait.
func (f *loginFailures) backoff() time.Duration {
	over := f.count - LoginFreeFailures
	if over < 0 {
		return 0
	}
	d := float64(LoginBaseBackoff) * math.Pow(2, float64(over))
	if d > float64(LoginMaxBackoff) {
		return LoginMaxBackoff
	}
	return time.Duration(d)
}

// stale reports whether f's failures are old news and nothing is in flight.
func (f *loginFailures) stale(now time.Time) bool {
	return f.inflight == 0 && now.Sub(f.last) > LoginFailureWindow+f.backoff()
}

// loginAttempt is one sign-in's place in the throttle, from begin until it
// is settled.
type loginAttempt struct {
	t       *loginThrottle
	email   string
	f       *loginFailures
	settled bool
}

// begin refuses an attempt for email while its back-off runs, or while the
// attempts already in flight use up what is left of the budget; otherwise it
// reserves a place for the attempt, atomically with the check. The caller
// must settle the attempt (defer release).
func (t *loginThrottle) begin(email string, now time.Time) (*loginAttempt, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.refusal(email, now); err != nil {
		return nil, err
	}
	f := t.accounts[email]
	if f == nil {
		f = t.track(email, now)
	}
	f.inflight++
	t.order.MoveToBack(f.elem)
	return &loginAttempt{t: t, email: email, f: f}, nil
}

// failed records a wrong password (or an unknown or disabled account).
func (a *loginAttempt) failed(now time.Time) {
	a.settle(func(t *loginThrottle) { t.failLocked(a.email, now) })
}

// succeeded clears the account's failures.
func (a *loginAttempt) succeeded() {
	a.settle(func(t *loginThrottle) { t.succeedLocked(a.email) })
}

// release ends an attempt that reached no verdict (an error before the
// password was checked, a panic): it neither counts nor clears. It does
// nothing once the attempt is settled, so callers defer it.
func (a *loginAttempt) release() { a.settle(func(*loginThrottle) {}) }

func (a *loginAttempt) settle(verdict func(*loginThrottle)) {
	t := a.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if a.settled {
		return
	}
	a.settled = true
	// The entry may have been forgotten (a success cleared it, or the table
	// was full) while the attempt was in flight; then it holds no place.
	if t.accounts[a.email] == a.f {
		a.f.inflight--
	}
	verdict(t)
	if f := t.accounts[a.email]; f != nil && f.count == 0 && f.inflight == 0 {
		t.remove(f)
	}
}

// check refuses an attempt for email while its back-off runs, without
// reserving a place (begin does both).
func (t *loginThrottle) check(email string, now time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refusal(email, now)
}

func (t *loginThrottle) refusal(email string, now time.Time) error {
	t.lazyInit()
	f, ok := t.accounts[email]
	if !ok {
		return nil
	}
	if now.Sub(f.last) > LoginFailureWindow && f.count <= LoginFreeFailures {
		f.count = 0 // the earlier failures are old news
		if f.inflight == 0 {
			t.remove(f)
			return nil
		}
	}
	var wait time.Duration
	switch {
	case f.count+f.inflight < LoginFreeFailures:
		return nil
	case f.inflight > 0:
		// The attempts in flight use up the budget: if they all fail,
		// this is the back-off that follows.
		wait = (&loginFailures{count: f.count + f.inflight}).backoff()
	default:
		wait = f.last.Add(f.backoff()).Sub(now)
	}
	if wait <= 0 {
		return nil
	}
	secs := int(math.Ceil(wait.Seconds()))
	return errdefs.RateLimited("too_many_login_attempts", secs, nil,
		"too many failed sign-ins for this email; wait %ds and retry, or ask an admin to reset the password", secs)
}

// fail records a failure for email outside any attempt.
func (t *loginThrottle) fail(email string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failLocked(email, now)
}

func (t *loginThrottle) failLocked(email string, now time.Time) {
	t.lazyInit()
	f, ok := t.accounts[email]
	if !ok {
		f = t.track(email, now)
	} else if now.Sub(f.last) > LoginFailureWindow+f.backoff() {
		f.count = 0 // the earlier failures are old news
	}
	f.count++
	f.last = now
	t.order.MoveToBack(f.elem)
}

// succeed clears email's failures.
func (t *loginThrottle) succeed(email string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.succeedLocked(email)
}

func (t *loginThrottle) succeedLocked(email string) {
	t.lazyInit()
	f, ok := t.accounts[email]
	if !ok {
		return
	}
	f.count = 0
	if f.inflight == 0 {
		t.remove(f)
	}
}

// track adds an entry for email, keeping the table within its bound at O(1)
// amortised cost: stale entries are swept from the front of the order (each
// entry is swept at most once, and a sweep stops at the first live one), and
// if the table is still full the least recently touched entry is forgotten.
//
// Forgetting the oldest live entry, rather than refusing to track the new
// email, keeps the promise best: refusing would let anyone who fills the
// table with junk failures (100k per 15 minutes) guess every other account's
// password unthrottled; dropping the oldest means that to win back the
// LoginFreeFailures guesses on one account, an attacker must first fail on
// loginMaxTracked other emails, each an argon2 check behind the per-address
// limiter. Refusing every untracked email instead would lock everyone out.
func (t *loginThrottle) track(email string, now time.Time) *loginFailures {
	for e := t.order.Front(); e != nil; e = t.order.Front() {
		t.examined++
		if f := e.Value.(*loginFailures); f.stale(now) {
			t.remove(f)
			continue
		}
		break
	}
	for len(t.accounts) >= loginMaxTracked {
		t.examined++
		t.remove(t.order.Front().Value.(*loginFailures))
	}
	f := &loginFailures{email: email, last: now}
	f.elem = t.order.PushBack(f)
	t.accounts[email] = f
	return f
}

func (t *loginThrottle) remove(f *loginFailures) {
	delete(t.accounts, f.email)
	t.order.Remove(f.elem)
}

func (t *loginThrottle) lazyInit() {
	if t.accounts == nil {
		t.accounts = map[string]*loginFailures{}
	}
	if t.order == nil {
		t.order = list.New()
	}
}
