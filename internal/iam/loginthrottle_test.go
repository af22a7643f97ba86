package iam

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

// memFailures is a LoginFailureStore in memory, judging lapses as the
// interface says; the store's conformance suite holds both dialects to the
// same. duringRead, when set, runs inside LoginFailures after the row was
// read and before it is returned.
type memFailures struct {
	mu         sync.Mutex
	rows       map[string]memFailure
	duringRead func()
}

type memFailure struct {
	n    int
	last time.Time
}

func (m *memFailures) LoginFailures(_ context.Context, account string) (int, time.Time, error) {
	m.mu.Lock()
	r := m.rows[account]
	during := m.duringRead
	m.duringRead = nil
	m.mu.Unlock()
	if during != nil {
		during()
	}
	return r.n, r.last, nil
}

func (m *memFailures) RecordLoginFailure(_ context.Context, account string, at time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.rows[account]
	switch {
	case !ok || at.Sub(r.last) > LoginFailuresLapse(r.n):
		r = memFailure{n: 1, last: at}
	default:
		r.n++
		if at.After(r.last) {
			r.last = at
		}
	}
	m.rows[account] = r
	return r.n, nil
}

func (m *memFailures) ClearLoginFailures(_ context.Context, account string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rows, account)
	return nil
}

func (m *memFailures) PruneLoginFailures(_ context.Context, before time.Time, limit int) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for k, r := range m.rows {
		if n < int64(limit) && r.last.Before(before) {
			delete(m.rows, k)
			n++
		}
	}
	return n, nil
}

// testThrottle is one replica's throttle over a shared memFailures.
type testThrottle struct {
	t  *testing.T
	lt *loginThrottle
	m  *memFailures
}

func newTestThrottle(t *testing.T, m *memFailures) testThrottle {
	if m == nil {
		m = &memFailures{rows: map[string]memFailure{}}
	}
	return testThrottle{t: t, lt: &loginThrottle{accounts: map[string]*loginEntry{}}, m: m}
}

func (h testThrottle) begin(who string, now time.Time) (*loginAttempt, error) {
	return h.lt.begin(context.Background(), h.m, who, now)
}

// check is whether an attempt for who may go ahead now, leaving no trace.
func (h testThrottle) check(who string, now time.Time) error {
	a, err := h.begin(who, now)
	if err == nil {
		a.release()
	}
	return err
}

// fail is one attempt for who, which fails.
func (h testThrottle) fail(who string, now time.Time) {
	h.t.Helper()
	a, err := h.begin(who, now)
	if err != nil {
		h.t.Fatalf("attempt for %s refused: %v", who, err)
	}
	if err := a.failed(context.Background(), now); err != nil {
		h.t.Fatal(err)
	}
}

func (h testThrottle) succeed(who string, now time.Time) {
	h.t.Helper()
	a, err := h.begin(who, now)
	if err != nil {
		h.t.Fatalf("attempt for %s refused: %v", who, err)
	}
	if err := a.succeeded(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

// The replica keeps only the attempts in flight: however many emails fail,
// its table is empty once they are settled, and their failures are all
// counted in the shared store.
func TestLoginThrottleKeepsOnlyAttemptsInFlight(t *testing.T) {
	h := newTestThrottle(t, nil)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	email := func(i int) string { return "user" + strconv.Itoa(i) + "@example.com" }
	const emails = 20_000
	for i := 0; i < emails; i++ {
		h.fail(email(i), now)
	}
	if n := len(h.lt.accounts); n != 0 {
		t.Fatalf("%d settled accounts are still in the replica's table", n)
	}
	if n := len(h.m.rows); n != emails {
		t.Fatalf("the store counts %d accounts, want %d", n, emails)
	}
	// The first is still counted, however many came after it.
	for i := 1; i < LoginFreeFailures; i++ {
		h.fail(email(0), now)
	}
	if err := h.check(email(0), now); err == nil {
		t.Fatal("an email failed before 20,000 others is not throttled")
	}
	if n := len(h.lt.accounts); n != 0 {
		t.Fatalf("refused and released attempts left %d entries", n)
	}
}

// An attempt holds its place from begin until it is settled: parallel
// attempts share the free budget, and a released attempt gives its place back.
func TestLoginThrottleReservesAttempts(t *testing.T) {
	h := newTestThrottle(t, nil)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const who = "ada@example.com"
	var held []*loginAttempt
	for i := 0; i < LoginFreeFailures; i++ {
		a, err := h.begin(who, now)
		if err != nil {
			t.Fatalf("attempt %d refused: %v", i, err)
		}
		held = append(held, a)
	}
	if _, err := h.begin(who, now); err == nil {
		t.Fatal("an attempt past the budget began while the budget was in flight")
	}
	for _, a := range held {
		a.release()
		a.release() // idempotent
	}
	if len(h.lt.accounts) != 0 {
		t.Fatalf("released attempts left %d entries", len(h.lt.accounts))
	}
	for i := 0; i < LoginFreeFailures; i++ {
		a, err := h.begin(who, now)
		if err != nil {
			t.Fatalf("after release, attempt %d refused: %v", i, err)
		}
		if err := a.failed(context.Background(), now); err != nil {
			t.Fatal(err)
		}
		a.release() // a no-op once settled
	}
	if _, err := h.begin(who, now); err == nil {
		t.Fatal("attempt past the free failures not refused")
	}
	now = now.Add(LoginBaseBackoff)
	a, err := h.begin(who, now)
	if err != nil {
		t.Fatalf("refused after the back-off: %v", err)
	}
	if _, err := h.begin(who, now); err == nil {
		t.Fatal("a second attempt began beside the one the back-off allows")
	}
	if err := a.succeeded(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(h.lt.accounts) != 0 || len(h.m.rows) != 0 {
		t.Fatalf("a success left %d entries and %d counted accounts", len(h.lt.accounts), len(h.m.rows))
	}
}

// Two replicas share the failures but not the places in flight: the
// failures either records count for both, and a success on one clears
// them for both.
func TestLoginThrottleSharesFailuresAcrossReplicas(t *testing.T) {
	a := newTestThrottle(t, nil)
	b := newTestThrottle(t, a.m)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const who = "ada@example.com"
	for i := 0; i < LoginFreeFailures; i++ {
		[]testThrottle{a, b}[i%2].fail(who, now)
	}
	for _, r := range []testThrottle{a, b, newTestThrottle(t, a.m)} {
		if err := r.check(who, now); err == nil {
			t.Fatal("a replica let a sixth attempt through")
		}
	}
	now = now.Add(LoginBaseBackoff)
	b.succeed(who, now)
	for _, r := range []testThrottle{a, b} {
		if err := r.check(who, now); err != nil {
			t.Fatalf("after a success on the other replica: %v", err)
		}
	}
}

// A failure this replica records while a begin is reading the shared count
// is not missed: without reading again, the begin would add the stale count
// to places that the failure has already given back, and let a sixth
// attempt through.
func TestLoginThrottleReadsAgainAfterAFailureDuringItsRead(t *testing.T) {
	h := newTestThrottle(t, nil)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const who = "ada@example.com"
	for i := 0; i < LoginFreeFailures-1; i++ {
		h.fail(who, now)
	}
	fifth, err := h.begin(who, now)
	if err != nil {
		t.Fatal(err)
	}
	// The sixth reads 4 failures; the fifth fails before the read returns.
	h.m.duringRead = func() {
		if err := fifth.failed(context.Background(), now); err != nil {
			t.Error(err)
		}
	}
	if err := h.check(who, now); err == nil {
		t.Fatal("a sixth attempt began on a count read before the fifth failure was recorded")
	}
}
