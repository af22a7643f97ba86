package httpapi_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

func TestLoginAndDisabledUser(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		anon := s.Anonymous()
		uid, u := s.NewUser(admin, "ada@example.com")
		u.Do("GET", "/api/v1/me", nil).Want(t, 200)

		wrong := anon.Do("POST", "/api/v1/auth/login", map[string]string{"email": "ada@example.com", "password": "not-the-password"}).Want(t, 401)
		nobody := anon.Do("POST", "/api/v1/auth/login", map[string]string{"email": "nobody@example.com", "password": "not-the-password"}).Want(t, 401)
		if wrong.ErrorCode() != nobody.ErrorCode() || wrong.JSON["error"].(map[string]any)["message"] != nobody.JSON["error"].(map[string]any)["message"] {
			t.Fatal("login reveals whether an account exists")
		}
		anon.Do("GET", "/api/v1/me", nil).Want(t, 401)
		s.As("not.a.jwt").Do("GET", "/api/v1/me", nil).Want(t, 401)

		// Disabling cuts off the token already issued, on its next request.
		admin.Do("POST", "/api/v1/users/"+uid+"/disable", nil).Want(t, 200)
		if r := u.Do("GET", "/api/v1/me", nil).Want(t, 401); r.ErrorCode() != "invalid_token" {
			t.Fatalf("disabled user's token: %s", r.Body)
		}
		anon.Do("POST", "/api/v1/auth/login", map[string]string{"email": "ada@example.com", "password": "x-long-password"}).Want(t, 401)
		// Re-enabling does not revive old tokens.
		admin.Do("POST", "/api/v1/users/"+uid+"/enable", nil).Want(t, 200)
		u.Do("GET", "/api/v1/me", nil).Want(t, 401)

		// An admin cannot lock themselves out.
		me := admin.Do("GET", "/api/v1/me", nil).Want(t, 200)
		admin.Do("POST", "/api/v1/users/"+me.String("id")+"/disable", nil).Want(t, 409)
		// Only platform admins manage users.
		u2id, u2 := s.NewUser(admin, "bob@example.com")
		u2.Do("POST", "/api/v1/users", map[string]string{"email": "eve@example.com", "password": "long-enough-password"}).Want(t, 403)
		u2.Do("POST", "/api/v1/users/"+uid+"/disable", nil).Want(t, 403)
		_ = u2id
	})
}

func TestTokenExpiry(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	// Mint a token that is already past its lifetime with the server's own keys.
	now := time.Now
	s.App.Tokens.Now = func() time.Time { return now().Add(-2 * time.Hour) }
	me := admin.Do("GET", "/api/v1/me", nil).Want(t, 200)
	_ = me
	r := s.Anonymous().Do("POST", "/api/v1/auth/login", map[string]string{"email": s.Creds.AdminEmail, "password": s.Creds.AdminPassword}).Want(t, 200)
	s.App.Tokens.Now = now
	if r := s.As(r.String("access_token")).Do("GET", "/api/v1/me", nil).Want(t, 401); r.ErrorCode() != "invalid_token" {
		t.Fatalf("expired token: %s", r.Body)
	}
}

func TestMembershipsAndAuditLog(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		proj := s.Creds.ProjectID
		pa, paClient := s.NewUser(admin, "padmin@example.com")
		b := admin.Do("POST", "/api/v1/projects/"+proj+"/members", map[string]string{"user_id": pa, "role": "project_admin"}).Want(t, 201)
		admin.Do("POST", "/api/v1/projects/"+proj+"/members", map[string]string{"user_id": pa, "role": "project_admin"}).Want(t, 409)
		admin.Do("POST", "/api/v1/projects/"+proj+"/members", map[string]string{"user_id": pa, "role": "emperor"}).Want(t, 400)
		admin.Do("POST", "/api/v1/projects/"+proj+"/members", map[string]string{"user_id": pa, "role": "org_admin"}).Want(t, 400)
		admin.Do("POST", "/api/v1/projects/"+proj+"/members", map[string]string{"user_id": pa, "role": "platform_admin"}).Want(t, 400)

		// The project admin manages members of the project, not of the org.
		vid, viewer := s.NewUser(admin, "pviewer@example.com")
		paClient.Do("POST", "/api/v1/projects/"+proj+"/members", map[string]string{"user_id": vid, "role": "project_viewer"}).Want(t, 201)
		paClient.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/members", map[string]string{"user_id": vid, "role": "org_admin"}).Want(t, 403)
		members := paClient.Do("GET", "/api/v1/projects/"+proj+"/members", nil).Want(t, 200)
		if len(members.Items()) != 2 {
			t.Fatalf("members: %s", members.Body)
		}

		// Audit log: the project admin reads their project's rows only.
		rows := paClient.Do("GET", "/api/v1/audit-events?project_id="+proj+"&action=role_binding.create", nil).Want(t, 200)
		if len(rows.Items()) != 2 {
			t.Fatalf("project audit rows: %s", rows.Body)
		}
		for _, it := range rows.Items() {
			if it["project_id"] != proj || it["correlation_id"] == "" || it["after"] == nil {
				t.Fatalf("audit row: %v", it)
			}
		}
		paClient.Do("GET", "/api/v1/audit-events", nil).Want(t, 403)
		paClient.Do("GET", "/api/v1/audit-events?org_id="+s.Creds.OrgID, nil).Want(t, 403)
		viewer.Do("GET", "/api/v1/audit-events?project_id="+proj, nil).Want(t, 403)
		all := admin.Do("GET", "/api/v1/audit-events?limit=2", nil).Want(t, 200)
		if len(all.Items()) != 2 || all.String("next_cursor") == "" {
			t.Fatalf("paging: %s", all.Body)
		}
		denied := admin.Do("GET", "/api/v1/audit-events?outcome=denied&actor_id="+pa, nil).Want(t, 200)
		if len(denied.Items()) == 0 {
			t.Fatal("the project admin's refused org grant is not audited as denied")
		}
		future := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		if r := admin.Do("GET", "/api/v1/audit-events?since="+future, nil).Want(t, 200); len(r.Items()) != 0 {
			t.Fatalf("since filter: %s", r.Body)
		}
		admin.Do("GET", "/api/v1/audit-events?since=yesterday", nil).Want(t, 400)

		// Removing the binding takes effect on the next request.
		admin.Do("DELETE", "/api/v1/projects/"+proj+"/members/"+b.String("id"), nil).Want(t, 204)
		paClient.Do("GET", "/api/v1/projects/"+proj+"/members", nil).Want(t, 404)
	})
}

// The anonymous credential endpoints are throttled per client address: a
// burst is served, the next request gets 429 with Retry-After, and a
// signed-in caller's other requests are not affected.
func TestCredentialEndpointsAreRateLimited(t *testing.T) {
	t.Parallel()
	// A refill every 1,000 s: none happens while the test runs, however
	// slowly a loaded machine hashes the passwords.
	s := servertest.Start(t, store.SQLite, func(c *config.Config) { c.CredentialRate, c.CredentialBurst = 0.001, 3 })
	anon := s.Anonymous()
	admin := s.Admin() // one of the burst
	bad := map[string]string{"email": "nobody@example.com", "password": "wrong-password-1"}
	anon.Do("POST", "/api/v1/auth/login", bad).Want(t, 401)
	anon.Do("POST", "/api/v1/auth/login", bad).Want(t, 401)
	r := anon.Do("POST", "/api/v1/auth/login", bad).Want(t, 429)
	if r.ErrorCode() != "rate_limited" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("throttled login: %s", r.Body)
	}
	tok := anon.Do("POST", "/api/v1/auth/service-account/token", map[string]string{"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": "x.y.z"})
	tok.Want(t, 429)
	admin.Do("GET", "/api/v1/me", nil).Want(t, 200)
}

// A token minted around a disable (the sign-in or the assertion exchange
// checked the account just before the disable committed, and minted just
// after it: a password check takes a tenth of a second) is refused while
// the account is disabled, and re-enabling the account does not bring it
// to life: every status change cuts the account's tokens.
func TestReEnablingRevivesNoTokenMintedAroundTheDisable(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	tick := func() { time.Sleep(3 * time.Millisecond) } // tokens are cut by the millisecond

	uid, u := s.NewUser(admin, "ada@example.com")
	me := u.Do("GET", "/api/v1/me", nil).Want(t, 200)
	admin.Do("POST", "/api/v1/users/"+uid+"/disable", nil).Want(t, 200)
	tick()
	late, err := s.App.Tokens.Issue(principal.Principal{Type: principal.User, ID: uid, Email: me.String("email")}, "")
	if err != nil {
		t.Fatal(err)
	}
	s.As(late.AccessToken).Do("GET", "/api/v1/me", nil).Want(t, 401)
	tick()
	admin.Do("POST", "/api/v1/users/"+uid+"/enable", nil).Want(t, 200)
	if r := s.As(late.AccessToken).Do("GET", "/api/v1/me", nil); r.Status != 401 {
		t.Errorf("a user token minted after the disable works once the account is enabled again: %d", r.Status)
	}

	// Enabling an account that is enabled cuts nothing.
	admin.Do("POST", "/api/v1/users/"+admin.Do("GET", "/api/v1/me", nil).Want(t, 200).String("id")+"/enable", nil).Want(t, 200)
	admin.Do("GET", "/api/v1/me", nil).Want(t, 200)

	sa := admin.Do("POST", "/api/v1/projects/"+s.Creds.ProjectID+"/service-accounts",
		map[string]any{"name": "ci", "slug": "ci", "roles": []string{"project_viewer"}}).Want(t, 201)
	saPath := "/api/v1/projects/" + s.Creds.ProjectID + "/service-accounts/" + sa.String("id")
	admin.Do("POST", saPath+"/disable", nil).Want(t, 200)
	tick()
	lateSA, err := s.App.Tokens.Issue(principal.Principal{Type: principal.ServiceAccount, ID: sa.String("id"),
		OrgID: s.Creds.OrgID, ProjectID: s.Creds.ProjectID}, sa.String("key_id"))
	if err != nil {
		t.Fatal(err)
	}
	s.As(lateSA.AccessToken).Do("GET", "/api/v1/me", nil).Want(t, 401)
	tick()
	admin.Do("POST", saPath+"/enable", nil).Want(t, 200)
	if r := s.As(lateSA.AccessToken).Do("GET", "/api/v1/me", nil); r.Status != 401 {
		t.Errorf("a service-account token minted after the disable works once the account is enabled again: %d", r.Status)
	}
}
