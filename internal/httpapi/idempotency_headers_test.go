package httpapi_test

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A launch retried with its idempotency key (what the SDKs and the CLI do
// after a timeout) is answered as the first one was, Location included: the
// caller polls the operation the first request started, and no second one
// is started.
func TestKeyedLaunchReplayCarriesLocation(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		e := newInstanceEnv(t, d, "echo", map[string]v1.Image{"1.0.0": nil}, echoManifest("echo"), 1)
		e.node.serve(t, okResult)
		body := map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "retried", "operating_mode": "tenant_dedicated",
			"control_plane_scope": "project", "config": map[string]any{}}
		first := e.bot.Do("POST", e.path("/app-instances"), body, "X-Idempotency-Key", "launch-1").Want(t, 202)
		loc := first.Header.Get("Location")
		if want := e.path("/operations/" + first.String("operation_id")); loc != want {
			t.Fatalf("first answer's Location %q, want %q", loc, want)
		}
		again := e.bot.Do("POST", e.path("/app-instances"), body, "X-Idempotency-Key", "launch-1").Want(t, 202)
		if again.Header.Get("Idempotent-Replayed") != "true" || again.String("id") != first.String("id") {
			t.Fatalf("retried launch was not the replay of the first: %s", again.Body)
		}
		if got := again.Header.Get("Location"); got != loc {
			t.Fatalf("replayed launch's Location %q, the first answer's %q", got, loc)
		}
		if op := waitOp(t, e.bot, e.pid, first.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("launch operation: %s", op.Body)
		}
	})
}

// A quota PUT retried with its idempotency key gets the first answer's
// ETag: the CLI and the console build their next If-Match from it.
func TestKeyedStorageQuotaReplayCarriesETag(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		admin := s.Admin()
		path := "/api/v1/projects/" + s.Creds.ProjectID + "/storage/quota"
		body := map[string]any{"blob_quota_bytes": 1000}
		first := admin.Do("PUT", path, body, "X-Idempotency-Key", "quota-1").Want(t, 200)
		tag := first.Header.Get("ETag")
		if tag == "" {
			t.Fatal("the quota PUT answered no ETag")
		}
		again := admin.Do("PUT", path, body, "X-Idempotency-Key", "quota-1").Want(t, 200)
		if again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatal("retried PUT was not a replay")
		}
		if got := again.Header.Get("ETag"); got != tag {
			t.Fatalf("replayed PUT's ETag %q, the first answer's %q", got, tag)
		}
		// The replayed tag is one the next change may be based on.
		admin.Do("PUT", path, map[string]any{"blob_quota_bytes": 2000}, "If-Match", again.Header.Get("ETag")).Want(t, 200)
	})
}
