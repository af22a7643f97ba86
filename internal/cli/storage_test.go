package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/client"
)

// `project storage set` changes only the quota it names (the request
// replaces both, so the CLI carries the other over), and --clear-… puts
// one back to the platform's default.
func TestProjectStorageCommands(t *testing.T) {
	c := loginCLI(t)
	show := func(args ...string) client.ProjectStorage {
		t.Helper()
		var v client.ProjectStorage
		if err := json.Unmarshal([]byte(c.must(append(args, "-o", "json")...)), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	v := show("project", "storage", "set", "--blob-quota", "10GiB")
	if v.Blobs.QuotaBytes == nil || *v.Blobs.QuotaBytes != 10<<30 || v.Blobs.QuotaSource != "project" || v.Registry.QuotaSource != "platform" {
		t.Fatalf("after --blob-quota 10GiB: %+v", v)
	}
	v = show("project", "storage", "set", "--registry-quota", "1.5GB")
	if v.Blobs.QuotaBytes == nil || *v.Blobs.QuotaBytes != 10<<30 || v.Registry.QuotaBytes == nil || *v.Registry.QuotaBytes != 1_500_000_000 {
		t.Fatalf("setting the registry quota lost the blob quota: %+v", v)
	}
	v = show("project", "storage", "set", "--clear-blob-quota")
	if v.Blobs.QuotaSource != "platform" || v.Blobs.QuotaBytes != nil || v.Registry.QuotaSource != "project" {
		t.Fatalf("after --clear-blob-quota: %+v", v)
	}
	if got := show("project", "storage"); got.Registry.QuotaBytes == nil || *got.Registry.QuotaBytes != 1_500_000_000 {
		t.Fatalf("project storage: %+v", got)
	}
	for _, args := range [][]string{{"--blob-quota", "lots"}, {"--blob-quota", "1GB", "--clear-blob-quota"}, {}} {
		if code, _, stderr := c.run("", append([]string{"project", "storage", "set"}, args...)...); code != exitUsage {
			t.Fatalf("project storage set %v: exit %d, want %d\n%s", args, code, exitUsage, stderr)
		}
	}
}

// `project storage set` sends the ETag of its read as If-Match, so a quota
// another admin sets between the CLI's read and its PUT stands: the CLI
// changes nothing and says so (exit 1), instead of putting back the value
// it read. The other admin's change is made by a proxy in front of the
// server, at the moment the CLI's PUT reaches it.
func TestProjectStorageSetRefusesAChangeMadeSinceItsRead(t *testing.T) {
	c := loginCLI(t)
	admin := c.s.Admin()
	quotaPath := "/api/v1/projects/" + c.s.Creds.ProjectID + "/storage/quota"
	c.must("project", "storage", "set", "--registry-quota", "1GB")

	target, err := url.Parse(c.s.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var sentIfMatch string
	var between int
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			sentIfMatch = r.Header.Get("If-Match")
			between = admin.Do("PUT", quotaPath, map[string]any{"blob_quota_bytes": 5, "registry_quota_bytes": 7}).Status
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()

	code, _, stderr := c.run("", "project", "storage", "set", "--blob-quota", "10GiB", "--api-url", front.URL, "--token", admin.Token)
	if between != 200 {
		t.Fatalf("the other admin's change: %d", between)
	}
	if sentIfMatch == "" {
		t.Fatalf("project storage set sent no If-Match (exit %d)\n%s", code, stderr)
	}
	if code != exitError || !strings.Contains(stderr, "changed (another admin?) while this command ran, so nothing was changed") ||
		!strings.Contains(stderr, "storage_quota_changed (HTTP 412)") {
		t.Fatalf("exit %d, want %d with the 412 explained:\n%s", code, exitError, stderr)
	}
	var v client.ProjectStorage
	if err := json.Unmarshal([]byte(c.must("project", "storage", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Blobs.QuotaBytes == nil || *v.Blobs.QuotaBytes != 5 || v.Registry.QuotaBytes == nil || *v.Registry.QuotaBytes != 7 {
		t.Fatalf("the other admin's quotas were overwritten: %+v", v)
	}
}
