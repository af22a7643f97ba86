package httpapi_test

import (
	"net/http"
	"testing"

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
// registry token request.
func TestRegistryCredentialsAreBoundToTheirOwner(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		pid := s.Creds.ProjectID
		pubID, pub := s.NewUser(admin, "publisher@example.com")
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
		if code := registryToken(t, s, rc); code != 200 {
			t.Fatalf("re-enabled owner's credentials: /v2/token %d", code)
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
