package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// A look-alike of an existing account cannot be created: invisible and
// direction-changing code points are refused, and compatibility forms fold
// onto the account they imitate.
func TestLookAlikeEmailsRefused(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// The registry's token endpoint, where docker login sends secrets, shares the
// per-address limiter with sign-in and answers 429 in the registry's format.
//
// Serial (no t.Parallel): the limiter refills a token every 2 s, so the
// three requests must come within 2 s, which other tests' load may stretch.
func TestRegistryTokenIsRateLimited(t *testing.T) {
	s := servertest.Start(t, store.SQLite, func(c *config.Config) { c.CredentialRate, c.CredentialBurst = 0.5, 2 })
	get := func() *http.Response {
		req, _ := http.NewRequest("GET", s.URL+"/v2/token?scope=repository:x/y:pull", nil)
		req.SetBasicAuth("nobody", "wrong")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for i := 0; i < 2; i++ {
		if resp := get(); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i, resp.StatusCode)
		}
	}
	resp := get()
	var body struct {
		Errors []struct{ Code string } `json:"errors"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		len(body.Errors) != 1 || body.Errors[0].Code != "TOOMANYREQUESTS" {
		t.Fatalf("throttled token request: %d %v %+v", resp.StatusCode, resp.Header, body)
	}
}
