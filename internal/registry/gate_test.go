package registry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type fakeGate struct{ denied, frozen string }

func (g fakeGate) ManifestDenied(_ context.Context, _, d string) (bool, error) {
	return d == g.denied, nil
}
func (g fakeGate) TagFrozen(_ context.Context, _, tag string) (bool, error) {
	return tag == g.frozen, nil
}

func TestSignatureTagDigest(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	for tag, want := range map[string]string{
		"sha256-" + hex + ".sig": "sha256:" + hex, "sha256-" + hex + ".att": "sha256:" + hex,
		"sha256-" + hex + ".sbom": "", "sha256-" + hex[:10] + ".sig": "", "1.0.0": "", "sha256-" + strings.ToUpper(hex) + ".sig": "",
	} {
		got, ok := SignatureTagDigest(tag)
		if got != want || ok != (want != "") {
			t.Errorf("%s: got %q %v, want %q", tag, got, ok, want)
		}
	}
}

// The gate decides on the digest the registry's answer carries, so a tag
// that resolves to a revoked digest is refused like the digest itself.
func TestGateManifestReadsAndTagWrites(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := "sha256:good"
		if strings.HasSuffix(r.URL.Path, "/bad") || strings.HasSuffix(r.URL.Path, "sha256:bad") {
			d = "sha256:bad"
		}
		w.Header().Set("Docker-Content-Digest", d)
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusCreated)
			return
		}
		_, _ = w.Write([]byte(`{"manifest":true}`))
	})
	h := gated(fakeGate{denied: "sha256:bad", frozen: "sha256-x.sig"}, next, func(w http.ResponseWriter, _ *http.Request, err error) {
		t.Fatalf("gate failed: %v", err)
	})
	do := func(method, path, auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, c := range []struct {
		method, path, auth string
		want               int
		body               string
	}{
		{"GET", "/v2/a/b/manifests/good", "", 200, "manifest"},
		{"GET", "/v2/a/b/manifests/bad", "", 404, "MANIFEST_UNKNOWN"},
		{"HEAD", "/v2/a/b/manifests/sha256:bad", "", 404, ""},
		// A revoked manifest read as a blob of its repository is refused
		// too; other blobs pass.
		{"GET", "/v2/a/b/blobs/sha256:bad", "", 404, "BLOB_UNKNOWN"},
		{"HEAD", "/v2/a/b/blobs/sha256:bad", "", 404, ""},
		{"GET", "/v2/a/b/blobs/sha256:good", "", 200, "manifest"},
		{"PUT", "/v2/a/b/manifests/sha256-x.sig", "Bearer t", 403, "DENIED"},
		// The registry takes the scheme in any case, and so does the gate.
		{"PUT", "/v2/a/b/manifests/sha256-x.sig", "bearer t", 403, "DENIED"},
		{"DELETE", "/v2/a/b/manifests/sha256-x.sig", "BEARER t", 403, "DENIED"},
		{"PUT", "/v2/a/b/manifests/sha256-x.sig", "Basic dTpw", 403, "DENIED"},
		{"PUT", "/v2/a/b/manifests/sha256-x.sig", "", 201, ""}, // the registry answers anonymous writes
		{"PUT", "/v2/a/b/manifests/1.0.0", "Bearer t", 201, ""},
		// On a case-insensitive filesystem these are the frozen tag's
		// storage: refused as the tag itself.
		{"PUT", "/v2/a/b/manifests/SHA256-X.SIG", "Bearer t", 403, "DENIED"},
		{"PUT", "/v2/a/b/manifests/sha256-X.sig", "Bearer t", 403, "DENIED"},
		{"DELETE", "/v2/a/b/manifests/Sha256-x.Sig", "Bearer t", 403, "DENIED"},
		{"PUT", "/v2/a/b/manifests/V1.0.0", "Bearer t", 201, ""},
	} {
		rec := do(c.method, c.path, c.auth)
		if rec.Code != c.want || !strings.Contains(rec.Body.String(), c.body) {
			t.Errorf("%s %s: %d %s", c.method, c.path, rec.Code, rec.Body)
		}
		if rec.Code == 404 && (rec.Header().Get("Docker-Content-Digest") != "" || strings.Contains(rec.Body.String(), `"manifest":true`)) {
			t.Errorf("%s %s: a denied manifest leaked: %v %s", c.method, c.path, rec.Header(), rec.Body)
		}
	}
}
