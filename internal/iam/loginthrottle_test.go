package iam

import (
	"strconv"
	"testing"
	"time"
)

// Past loginMaxTracked emails the table stays within its bound, and each
// further failing email costs O(1): the least recently touched entry is
// forgotten, not the whole table scanned under the lock every sign-in needs.
func TestLoginThrottleStaysBoundedAndCheap(t *testing.T) {
	lt := &loginThrottle{}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	email := func(i int) string { return "user" + strconv.Itoa(i) + "@example.com" }
	for i := 0; i < loginMaxTracked; i++ {
		lt.fail(email(i), now)
	}
	const past = 2000
	lt.examined = 0
	for i := loginMaxTracked; i < loginMaxTracked+past; i++ {
		lt.fail(email(i), now)
	}
	if n := len(lt.accounts); n > loginMaxTracked || lt.order.Len() != n {
		t.Fatalf("tracked %d emails (order %d), bound %d", n, lt.order.Len(), loginMaxTracked)
	}
	if lt.examined > 2*past {
		t.Fatalf("%d failures past the bound examined %d entries, want at most %d", past, lt.examined, 2*past)
	}
	// The oldest were forgotten; the newest are still counted.
	if _, ok := lt.accounts[email(0)]; ok {
		t.Fatal("the least recently failed email is still tracked past the bound")
	}
	last := email(loginMaxTracked + past - 1)
	for i := 1; i < LoginFreeFailures; i++ {
		lt.fail(last, now)
	}
	if err := lt.check(last, now); err == nil {
		t.Fatal("an email failed past the bound is not throttled")
	}

	// Stale entries are swept as new ones come, each once.
	now = now.Add(LoginFailureWindow + LoginMaxBackoff + time.Second)
	lt.examined = 0
	lt.fail("fresh@example.com", now)
	if n := len(lt.accounts); n != 1 || lt.order.Len() != 1 {
		t.Fatalf("after the window, %d entries remain (order %d), want 1", n, lt.order.Len())
	}
	if lt.examined > loginMaxTracked+1 {
		t.Fatalf("the sweep examined %d entries for %d tracked", lt.examined, loginMaxTracked)
	}
}

// An attempt holds its place from begin until it is settled: parallel
// attempts share the free budget, and a released attempt gives its place back.
func TestLoginThrottleReservesAttempts(t *testing.T) {
	lt := &loginThrottle{}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const who = "ada@example.com"
	var held []*loginAttempt
	for i := 0; i < LoginFreeFailures; i++ {
		a, err := lt.begin(who, now)
		if err != nil {
			t.Fatalf("attempt %d refused: %v", i, err)
		}
		held = append(held, a)
	}
	if _, err := lt.begin(who, now); err == nil {
		t.Fatal("an attempt past the budget began while the budget was in flight")
	}
	for _, a := range held {
		a.release()
		a.release() // idempotent
	}
	if len(lt.accounts) != 0 || lt.order.Len() != 0 {
		t.Fatalf("released attempts left %d entries", len(lt.accounts))
	}
	for i := 0; i < LoginFreeFailures; i++ {
		a, err := lt.begin(who, now)
		if err != nil {
			t.Fatalf("after release, attempt %d refused: %v", i, err)
		}
		a.failed(now)
		a.release() // a no-op once settled
	}
	if _, err := lt.begin(who, now); err == nil {
		t.Fatal("attempt past the free failures not refused")
	}
	now = now.Add(LoginBaseBackoff)
	a, err := lt.begin(who, now)
	if err != nil {
		t.Fatalf("refused after the back-off: %v", err)
	}
	if _, err := lt.begin(who, now); err == nil {
		t.Fatal("a second attempt began beside the one the back-off allows")
	}
	a.succeeded()
	if len(lt.accounts) != 0 {
		t.Fatalf("a success left %d entries", len(lt.accounts))
	}
}
