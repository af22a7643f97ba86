package httpapi_test

import (
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// A look-alike of an existing account cannot be created: invisible and
// direction-changing code points are refused, and compatibility forms fold
// onto the account they imitate.
func TestLookAlikeEmailsRefused(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	for _, email := range []string{"admin\u200b@gpuaas.dev", "\u202eadmin@gpuaas.dev", "admin@gpuaas.dev\ufeff"} {
		admin.Do("POST", "/api/v1/users", map[string]string{"email": email, "password": "long-enough-password"}).Want(t, 400)
	}
	admin.Do("POST", "/api/v1/users", map[string]string{"email": "ＡＤＭＩＮ@gpuaas.dev", "password": "long-enough-password"}).Want(t, 409)
	// The full-width form signs in to the same account.
	s.Anonymous().Do("POST", "/api/v1/auth/login", map[string]string{"email": "ＡＤＭＩＮ@GPUAAS.DEV", "password": s.Creds.AdminPassword}).Want(t, 200)
}

// Wrong passwords for one email from any address lock that email out with a
// growing back-off; unknown emails get the same answer; success resets.
func TestLoginPerAccountBackoff(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	clock := time.Now()
	s.App.IAM.Now = func() time.Time { return clock }
	admin := s.Admin()
	admin.Do("POST", "/api/v1/users", map[string]string{"email": "ada@example.com", "password": "long-enough-password"}).Want(t, 201)
	anon := s.Anonymous()
	login := func(email, pw string, want int) *servertest.Response {
		return anon.Do("POST", "/api/v1/auth/login", map[string]string{"email": email, "password": pw}).Want(t, want)
	}
	for _, email := range []string{"ada@example.com", "nobody@example.com"} {
		for i := 0; i < iam.LoginFreeFailures; i++ {
			login(email, "not-the-password", 401)
		}
		r := login(email, "not-the-password", 429)
		if r.ErrorCode() != "too_many_login_attempts" || r.Header.Get("Retry-After") != "1" {
			t.Fatalf("%s: %s %v", email, r.Body, r.Header)
		}
	}
	// The right password is refused too while the back-off runs ...
	login("ada@example.com", "long-enough-password", 429)
	// ... and the wait doubles with the next failure.
	clock = clock.Add(time.Second)
	login("ada@example.com", "not-the-password", 401)
	if r := login("ada@example.com", "not-the-password", 429); r.Header.Get("Retry-After") != "2" {
		t.Fatalf("back-off did not grow: %v", r.Header)
	}
	// Other accounts are untouched; a success resets the counter.
	s.Admin()
	clock = clock.Add(2 * time.Second)
	login("ada@example.com", "long-enough-password", 200)
	login("ada@example.com", "not-the-password", 401)
	login("ada@example.com", "long-enough-password", 200)
}
