package httpapi_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// Blob uploads stop at the configured object size and at the project's
// quota, refused with a code a client can act on; what fits still uploads.
func TestBlobUploadLimits(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite, func(c *config.Config) {
		c.MaxBlobBytes = 4096
		c.ProjectBlobQuota = 6000
	})
	admin := s.Admin()
	base := "/api/v1/projects/" + s.Creds.ProjectID + "/app-artifacts"
	intent := func(name string) string {
		pi := admin.Do("POST", base+"/publish-intents", map[string]any{"app_slug": "demo", "app_version": "1.0.0",
			"artifact_name": name, "artifact_kind": "blob", "source_type": "artifact_store"}).Want(t, 201)
		return pi.String("upload_url")
	}
	// Past the object size limit.
	r := admin.Do("PATCH", intent("huge"), bytes.Repeat([]byte("x"), 5000), "Upload-Offset", "0")
	if r.Status != 413 || r.ErrorCode() != "blob_too_large" {
		t.Fatalf("oversized blob: %d %s", r.Status, r.Body)
	}
	// Within both limits: uploaded and registered (4000 of 6000 bytes used).
	data := bytes.Repeat([]byte("y"), 4000)
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	admin.Do("PUT", intent("first")+"?digest="+digest, data, "Content-Range", fmt.Sprintf("bytes 0-%d/%d", len(data)-1, len(data))).Want(t, 201)
	admin.Do("POST", base, map[string]any{"app_slug": "demo", "app_version": "1.0.0", "artifact_name": "first", "artifact_kind": "blob",
		"source_type": "artifact_store", "source_uri": "artifact_store://projects/" + s.Creds.ProjectID + "/artifacts/demo/1.0.0/first",
		"digest": digest}).Want(t, 201)
	// A second 4000-byte blob fits the object limit but not the quota.
	r = admin.Do("PATCH", intent("second"), data, "Upload-Offset", "0")
	if r.Status != 422 || r.ErrorCode() != "blob_quota_exceeded" {
		t.Fatalf("over quota: %d %s", r.Status, r.Body)
	}
}
