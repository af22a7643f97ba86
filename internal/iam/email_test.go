package iam

import (
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

func TestNormalizeEmail(t *testing.T) {
	for in, want := range map[string]string{
		"ＡＤＭＩＮ@gpuaas.dev":  "admin@gpuaas.dev",
		" Ada@Example.COM ": "ada@example.com",
	} {
		if got, bad := NormalizeEmail(in); bad != nil || got != want {
			t.Errorf("NormalizeEmail(%q) = %q, %v; want %q", in, got, bad, want)
		}
	}
	for _, in := range []string{"admin\u200b@gpuaas.dev", "\u202eadmin@gpuaas.dev", "ad\u2060min@gpuaas.dev",
		"\ufeffadmin@gpuaas.dev", "admin@gpuaas\u200e.dev", "a\u2066dmin@gpuaas.dev", "ad\u00admin@gpuaas.dev"} {
		if _, bad := NormalizeEmail(in); bad == nil || bad.Field != "/email" {
			t.Errorf("NormalizeEmail(%q) accepted an invisible code point", in)
		}
	}
}

func TestLoginThrottleBackoff(t *testing.T) {
	lt := newTestThrottle(t, nil)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const who = "ada@example.com"
	for i := 0; i < LoginFreeFailures; i++ {
		if err := lt.check(who, now); err != nil {
			t.Fatalf("attempt %d refused: %v", i, err)
		}
		lt.fail(who, now)
	}
	retry := func() int {
		err := lt.check(who, now)
		e, ok := errdefs.As(err)
		if !ok || e.Kind != errdefs.KindRateLimited {
			t.Fatalf("attempt past the limit: %v", err)
		}
		return e.Details["retry_after_seconds"].(int)
	}
	if got := retry(); got != 1 {
		t.Fatalf("first back-off %ds, want 1s", got)
	}
	// Another account is untouched.
	if err := lt.check("bob@example.com", now); err != nil {
		t.Fatal(err)
	}
	// Each further failure doubles the wait, up to the cap.
	prev := 1
	for i := 0; i < 20; i++ {
		now = now.Add(time.Duration(prev) * time.Second)
		if err := lt.check(who, now); err != nil {
			t.Fatalf("refused after waiting the back-off: %v", err)
		}
		lt.fail(who, now)
		got := retry()
		want := min(prev*2, int(LoginMaxBackoff/time.Second))
		if got != want {
			t.Fatalf("back-off after failure %d: %ds, want %ds", i, got, want)
		}
		prev = got
	}
	// Success resets.
	now = now.Add(LoginMaxBackoff)
	lt.succeed(who, now)
	for i := 0; i < LoginFreeFailures; i++ {
		if err := lt.check(who, now); err != nil {
			t.Fatalf("after a success, attempt %d refused", i)
		}
		lt.fail(who, now)
	}
}
