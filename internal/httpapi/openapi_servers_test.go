package httpapi

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/api"
)

// The served contract names the host it was fetched from, not a fixed address.
func TestOpenAPIServersReflectServingHost(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("GET", "http://api.example.test:9443/api/openapi.yaml", nil)
	got := string(withServerOrigin(api.OpenAPI, r))
	if !strings.Contains(got, "servers:\n  - url: 'http://api.example.test:9443'\n") {
		t.Fatalf("servers not rewritten:\n%s", got[:400])
	}
	if strings.Contains(got, "127.0.0.1:8080") {
		t.Fatal("document still names a hard-coded host")
	}
}
