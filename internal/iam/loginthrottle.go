package iam

import (
	"math"
	"strconv"
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
const (
	LoginFreeFailures  = 5
	LoginFailureWindow = 15 * time.Minute
	LoginBaseBackoff   = time.Second
	LoginMaxBackoff    = 15 * time.Minute
	// loginMaxTracked bounds memory; past it, stale entries are dropped.
	loginMaxTracked = 100_000
)

type loginThrottle struct {
	mu       sync.Mutex
	accounts map[string]*loginFailures
}

type loginFailures struct {
	count int
	last  time.Time
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

// check refuses an attempt for email while its back-off runs.
func (t *loginThrottle) check(email string, now time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.accounts[email]
	if !ok {
		return nil
	}
	if now.Sub(f.last) > LoginFailureWindow && f.count <= LoginFreeFailures {
		delete(t.accounts, email)
		return nil
	}
	wait := f.last.Add(f.backoff()).Sub(now)
	if wait <= 0 {
		return nil
	}
	secs := int(math.Ceil(wait.Seconds()))
	return &errdefs.Error{Kind: errdefs.KindRateLimited, Code: "too_many_login_attempts",
		Message: "too many failed sign-ins for this email; wait " + strconv.Itoa(secs) + "s and retry, or ask an admin to reset the password",
		Details: map[string]any{"retry_after_seconds": secs}}
}

func (t *loginThrottle) fail(email string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.accounts[email]
	if !ok {
		if len(t.accounts) >= loginMaxTracked {
			for k, v := range t.accounts {
				if now.Sub(v.last) > LoginFailureWindow+v.backoff() {
					delete(t.accounts, k)
				}
			}
		}
		f = &loginFailures{}
		t.accounts[email] = f
	} else if now.Sub(f.last) > LoginFailureWindow+f.backoff() {
		f.count = 0 // the earlier failures are old news
	}
	f.count++
	f.last = now
}

func (t *loginThrottle) succeed(email string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.accounts, email)
}
