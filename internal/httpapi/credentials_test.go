package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/servertest"
)

// registryToken asks /v2/token for push,pull on repo with basic credentials.
func registryToken(t *testing.T, s *servertest.Server, rc regCreds) int {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+"/v2/token?scope=repository:"+rc.repo+":push,pull", nil)
	req.SetBasicAuth(rc.user, rc.pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Unwrap is bound to the intent's creator: anyone else gets the unknown-token
// answer (and does not burn the token), the refusal is audited in the
// owning project; the credentials then die with their owner on the next
// registry token request, and stay dead when the owner is enabled again
// (as the API token they were minted with does).
func TestRegistryCredentialsAreBoundToTheirOwner(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		pid := s.Creds.ProjectID
		pubPW := "pw-publisher-long-enough"
		pubID := admin.Do("POST", "/api/v1/users", map[string]string{"email": "publisher@example.com", "password": pubPW}).Want(t, 201).String("id")
		pub := s.Login("publisher@example.com", pubPW)
		admin.Do("POST", "/api/v1/projects/"+pid+"/members", map[string]string{"user_id": pubID, "role": "project_admin"}).Want(t, 201)
		_, stranger := s.NewUser(admin, "stranger@example.com")

		pi := pub.Do("POST", "/api/v1/projects/"+pid+"/app-artifacts/publish-intents",
			map[string]any{"app_slug": "demo", "app_version": "1.0.0", "artifact_name": "runtime", "signature_required": false}).Want(t, 201)
		tok := wrapToken(pi)
		for _, c := range []*servertest.Client{stranger, admin} {
			r := c.Do("POST", "/api/v1/apps/registry/unwrap", map[string]string{"wrapping_token": tok}).Want(t, 409)
			if r.ErrorCode() != "wrapping_token_invalid" {
				t.Fatalf("foreign unwrap: %s", r.Body)
			}
		}
		denied := admin.Do("GET", "/api/v1/audit-events?project_id="+pid+"&action=artifact.credentials.unwrap&outcome=denied", nil).Want(t, 200)
		if n := len(denied.Items()); n != 2 {
			t.Fatalf("%d denied unwraps in the project's audit view, want 2: %s", n, denied.Body)
		}
		rc := unwrap(t, pub, tok) // the refusals did not consume it

		if code := registryToken(t, s, rc); code != 200 {
			t.Fatalf("owner's credentials: /v2/token %d", code)
		}
		admin.Do("POST", "/api/v1/users/"+pubID+"/disable", nil).Want(t, 200)
		if code := registryToken(t, s, rc); code != 401 {
			t.Fatalf("disabled owner's credentials: /v2/token %d, want 401", code)
		}
		admin.Do("POST", "/api/v1/users/"+pubID+"/enable", nil).Want(t, 200)
		if code := registryToken(t, s, rc); code != 401 {
			t.Fatalf("re-enabled owner's credentials minted before the disable: /v2/token %d, want 401", code)
		}
		// Signed in again, the owner gets credentials that work.
		pub = s.Login("publisher@example.com", pubPW)
		pi = pub.Do("POST", "/api/v1/projects/"+pid+"/app-artifacts/publish-intents",
			map[string]any{"app_slug": "demo", "app_version": "1.0.1", "artifact_name": "runtime", "signature_required": false}).Want(t, 201)
		rc = unwrap(t, pub, wrapToken(pi))
		if code := registryToken(t, s, rc); code != 200 {
			t.Fatalf("re-enabled owner's new credentials: /v2/token %d", code)
		}
		// Losing the role on the project ends them too.
		bindings := admin.Do("GET", "/api/v1/projects/"+pid+"/members", nil).Want(t, 200)
		for _, b := range bindings.Items() {
			if b["principal_id"] == pubID {
				admin.Do("DELETE", "/api/v1/projects/"+pid+"/members/"+b["id"].(string), nil).Want(t, 204)
			}
		}
		if code := registryToken(t, s, rc); code != 401 {
			t.Fatalf("unbound owner's credentials: /v2/token %d, want 401", code)
		}
	})
}

// newPublisherAccount creates a service account that may publish in the
// seeded project and returns its key file.
func newPublisherAccount(t *testing.T, s *servertest.Server, admin *servertest.Client) client.KeyFile {
	t.Helper()
	pid := s.Creds.ProjectID
	r := admin.Do("POST", "/api/v1/projects/"+pid+"/service-accounts", map[string]any{"name": "ci", "slug": "ci",
		"roles": []string{"app_operator"}}).Want(t, 201)
	return client.KeyFile{Type: client.KeyFileType, ServiceAccountID: r.String("id"), ProjectID: pid,
		KeyID: r.String("key_id"), PrivateKeyPEM: r.String("private_key_pem"), TokenURL: r.String("token_url")}
}

// publishCreds creates a publish intent as c (an hour's, the longest) and
// unwraps its registry credentials.
func publishCreds(t *testing.T, s *servertest.Server, c *servertest.Client, version string) regCreds {
	t.Helper()
	_, rc := publishIntent(t, c, s.Creds.ProjectID, map[string]any{"app_slug": "demo", "app_version": version, "artifact_name": "runtime",
		"signature_required": false, "ttl_seconds": 3600})
	return rc
}

// Registry credentials a service account minted with a key die when that
// key is revoked (a rotation with no grace, the answer to a leaked key), as
// the API tokens minted with it do; credentials minted with the new key
// work.
func TestRegistryCredentialsDieWithTheirServiceAccountKey(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		kf := newPublisherAccount(t, s, admin)
		sa := s.AsServiceAccount(kf)
		rc := publishCreds(t, s, sa, "1.0.0")
		if code := registryToken(t, s, rc); code != 200 {
			t.Fatalf("service account's credentials: /v2/token %d", code)
		}
		r := admin.Do("POST", "/api/v1/projects/"+s.Creds.ProjectID+"/service-accounts/"+kf.ServiceAccountID+"/rotate-key",
			map[string]any{"grace_period_seconds": 0}).Want(t, 200)
		sa.Do("GET", "/api/v1/projects/"+s.Creds.ProjectID, nil).Want(t, 401)
		if code := registryToken(t, s, rc); code != 401 {
			t.Fatalf("credentials minted with a revoked key: /v2/token %d, want 401", code)
		}
		kf.KeyID, kf.PrivateKeyPEM = r.String("key_id"), r.String("private_key_pem")
		if code := registryToken(t, s, publishCreds(t, s, s.AsServiceAccount(kf), "1.0.1")); code != 200 {
			t.Fatalf("credentials minted with the new key: /v2/token %d", code)
		}
	})
}

// A service account's registry credentials minted before a disable stay
// refused once it is enabled again, as its API tokens from before do.
func TestRegistryCredentialsOfADisabledServiceAccountStayDead(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		kf := newPublisherAccount(t, s, admin)
		rc := publishCreds(t, s, s.AsServiceAccount(kf), "1.0.0")
		if code := registryToken(t, s, rc); code != 200 {
			t.Fatalf("service account's credentials: /v2/token %d", code)
		}
		base := "/api/v1/projects/" + s.Creds.ProjectID + "/service-accounts/" + kf.ServiceAccountID
		admin.Do("POST", base+"/disable", nil).Want(t, 200)
		if code := registryToken(t, s, rc); code != 401 {
			t.Fatalf("disabled account's credentials: /v2/token %d, want 401", code)
		}
		admin.Do("POST", base+"/enable", nil).Want(t, 200)
		if code := registryToken(t, s, rc); code != 401 {
			t.Fatalf("re-enabled account's credentials minted before the disable: /v2/token %d, want 401", code)
		}
		if code := registryToken(t, s, publishCreds(t, s, s.AsServiceAccount(kf), "1.0.1")); code != 200 {
			t.Fatalf("re-enabled account's new credentials: /v2/token %d", code)
		}
	})
}

// A user's registry credentials minted before a disable stay refused once
// the user is enabled again; credentials minted after signing in again work.
func TestRegistryCredentialsOfADisabledUserStayDead(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		const email, pw = "builder@example.com", "pw-builder-long-enough"
		uid := admin.Do("POST", "/api/v1/users", map[string]string{"email": email, "password": pw}).Want(t, 201).String("id")
		admin.Do("POST", "/api/v1/projects/"+s.Creds.ProjectID+"/members", map[string]string{"user_id": uid, "role": "app_operator"}).Want(t, 201)
		rc := publishCreds(t, s, s.Login(email, pw), "1.0.0")
		if code := registryToken(t, s, rc); code != 200 {
			t.Fatalf("user's credentials: /v2/token %d", code)
		}
		admin.Do("POST", "/api/v1/users/"+uid+"/disable", nil).Want(t, 200)
		admin.Do("POST", "/api/v1/users/"+uid+"/enable", nil).Want(t, 200)
		if code := registryToken(t, s, rc); code != 401 {
			t.Fatalf("re-enabled user's credentials minted before the disable: /v2/token %d, want 401", code)
		}
		if code := registryToken(t, s, publishCreds(t, s, s.Login(email, pw), "1.0.1")); code != 200 {
			t.Fatalf("re-enabled user's new credentials: /v2/token %d", code)
		}
	})
}
