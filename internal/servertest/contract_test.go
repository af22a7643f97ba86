package servertest

import (
	"net/http"
	"strings"
	"testing"
)

// The contract check reports what openapi.yaml does not describe, and
// passes what it does.
func TestContractCheck(t *testing.T) {
	c, err := LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	errBody := `{"error":{"code":"not_found","message":"no such org","correlation_id":"c-1","details":{}}}`
	for _, tc := range []struct {
		name, method, path string
		status             int
		header             http.Header
		body               string
		want               string // "" passes; else a part of the error
	}{
		{"documented", "GET", "/healthz", 200, jsonCT, `{"status":"ok"}`, ""},
		{"documented error", "GET", "/api/v1/orgs/o-1", 404, jsonCT, errBody, ""},
		{"no content", "DELETE", "/api/v1/orgs/o-1/members/b-1", 204, http.Header{}, "", ""},
		{"a parameter holding a NUL", "GET", "/api/v1/orgs/\x00", 400, jsonCT, errBody, ""},
		{"unknown path answered 404", "GET", "/api/v1/nowhere", 404, jsonCT, errBody, ""},
		{"wrong shape", "GET", "/healthz", 200, jsonCT, `{"status":"fine"}`, "GET /healthz -> 200"},
		{"missing field", "GET", "/healthz", 200, jsonCT, `{}`, "GET /healthz -> 200"},
		{"not JSON", "GET", "/healthz", 200, jsonCT, `ok`, "GET /healthz -> 200"},
		{"undocumented status", "GET", "/healthz", 201, jsonCT, `{"status":"ok"}`, "status 201 is not documented"},
		{"success under default", "GET", "/api/v1/orgs/o-1", 202, jsonCT, `{}`, "status 202 is not documented"},
		{"undocumented path", "GET", "/api/v1/nowhere", 200, jsonCT, `{}`, "path /api/v1/nowhere is not in openapi.yaml"},
		{"undocumented method", "PUT", "/healthz", 200, jsonCT, `{"status":"ok"}`, "PUT /healthz is not in openapi.yaml"},
		{"error not the envelope", "GET", "/api/v1/orgs/o-1", 404, jsonCT, `{"message":"no"}`, "does not match #/components/schemas/Error"},
		{"404 not the envelope", "GET", "/api/v1/nowhere", 404, jsonCT, `not found`, "does not match #/components/schemas/Error"},
		{"wrong content type", "GET", "/healthz", 200, http.Header{"Content-Type": {"text/plain"}}, `{"status":"ok"}`, "GET /healthz -> 200"},
		{"a 204 carries no body whatever it claims", "DELETE", "/api/v1/orgs/o-1/members/b-1", 204, jsonCT, `{}`, ""},
		{"body on a bodiless 200", "DELETE", "/api/v1/orgs/o-1/members/b-1", 200, jsonCT, `{}`, "status 200 is not documented"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Check(tc.method, tc.path, tc.status, tc.header, []byte(tc.body))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want it to pass: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("want %q, it passed", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("want %q in: %v", tc.want, err)
			case err != nil:
				t.Logf("reported: %v", err)
			}
		})
	}
	// A literal segment beats a parameter, as in the server's mux.
	if tmpl, ok := c.Template("/api/v1/projects/p-1/app-artifacts/publish-intents"); !ok || !strings.HasSuffix(tmpl, "/app-artifacts/publish-intents") {
		t.Errorf("template: %q %v", tmpl, ok)
	}
	if tmpl, ok := c.Template("/api/v1/projects/p-1/app-artifacts/a-1"); !ok || !strings.HasSuffix(tmpl, "/app-artifacts/{artifact_id}") {
		t.Errorf("template: %q %v", tmpl, ok)
	}
}
