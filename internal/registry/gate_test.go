package registry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
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

// fakeRegistry stands in for the registry behind the gate: "Bearer push"
// may PUT and "Bearer delete" may DELETE (the scheme in any case, as the
// registry reads it); any other write gets the registry's 401 challenge.
// The manifest sha256:sig is tagged sha256-x.sig, sha256:img is tagged 1.0.0.
func fakeRegistry(t *testing.T) *gateHandler {
	authorized := func(r *http.Request, _ string) bool {
		scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		return strings.EqualFold(scheme, "bearer") && ((r.Method == http.MethodPut && tok == "push") || (r.Method == http.MethodDelete && tok == "delete"))
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodPut || r.Method == http.MethodDelete) && !authorized(r, "") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="http://r/v2/token",service="r",scope="repository:a/b:push,pull"`)
			writeDockerError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
			return
		}
		d := "sha256:good"
		if strings.HasSuffix(r.URL.Path, "/bad") || strings.HasSuffix(r.URL.Path, "sha256:bad") {
			d = "sha256:bad"
		}
		w.Header().Set("Docker-Content-Digest", d)
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		switch r.Method {
		case http.MethodPut:
			w.WriteHeader(http.StatusCreated)
			return
		case http.MethodDelete:
			w.WriteHeader(http.StatusAccepted)
			return
		}
		_, _ = w.Write([]byte(`{"manifest":true}`))
	})
	return &gateHandler{
		gate:       fakeGate{denied: "sha256:bad", frozen: "sha256-x.sig"},
		authorized: authorized,
		tagsOf: func(_ context.Context, _, d string) ([]string, error) {
			return map[string][]string{"sha256:sig": {"sha256-x.sig", "latest-sig"}, "sha256:img": {"1.0.0"}}[d], nil
		},
		next: next,
		fail: func(w http.ResponseWriter, _ *http.Request, err error) { t.Fatalf("gate failed: %v", err) },
	}
}

func serveGate(h http.Handler, method, path, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// The gate decides on the digest the registry's answer carries, so a tag
// that resolves to a revoked digest is refused like the digest itself.
func TestGateManifestReadsAndTagWrites(t *testing.T) {
	h := fakeRegistry(t)
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
		{"PUT", "/v2/a/b/manifests/sha256-x.sig", "Bearer push", 403, "can no longer be changed"},
		// The registry takes the scheme in any case, and so does the gate.
		{"PUT", "/v2/a/b/manifests/sha256-x.sig", "bearer push", 403, "DENIED"},
		{"DELETE", "/v2/a/b/manifests/sha256-x.sig", "BEARER delete", 403, "DENIED"},
		{"PUT", "/v2/a/b/manifests/1.0.0", "Bearer push", 201, ""},
		// On a case-insensitive filesystem these are the frozen tag's
		// storage: refused as the tag itself.
		{"PUT", "/v2/a/b/manifests/SHA256-X.SIG", "Bearer push", 403, "DENIED"},
		{"PUT", "/v2/a/b/manifests/sha256-X.sig", "Bearer push", 403, "DENIED"},
		{"DELETE", "/v2/a/b/manifests/Sha256-x.Sig", "Bearer delete", 403, "DENIED"},
		{"PUT", "/v2/a/b/manifests/V1.0.0", "Bearer push", 201, ""},
	} {
		rec := serveGate(h, c.method, c.path, c.auth)
		if rec.Code != c.want || !strings.Contains(rec.Body.String(), c.body) {
			t.Errorf("%s %s: %d %s", c.method, c.path, rec.Code, rec.Body)
		}
		if rec.Code == 404 && (rec.Header().Get("Docker-Content-Digest") != "" || strings.Contains(rec.Body.String(), `"manifest":true`)) {
			t.Errorf("%s %s: a denied manifest leaked: %v %s", c.method, c.path, rec.Header(), rec.Body)
		}
	}
}

// A delete by digest removes the manifest and every tag pointing at it:
// the gate refuses it when one of those tags is frozen, as it refuses the
// delete of the tag, even to a caller whose token carries "delete".
func TestGateRefusesDeleteByDigestOfFrozenManifest(t *testing.T) {
	h := fakeRegistry(t)
	for _, c := range []struct {
		path, auth string
		want       int
		body       string
	}{
		{"/v2/a/b/manifests/sha256:sig", "Bearer delete", 403, "can no longer be deleted"},
		{"/v2/a/b/manifests/sha256:sig", "bearer delete", 403, "DENIED"},
		{"/v2/a/b/manifests/sha256-x.sig", "Bearer delete", 403, "DENIED"},
		// Manifests no frozen tag points at are deleted as before.
		{"/v2/a/b/manifests/sha256:img", "Bearer delete", 202, ""},
		{"/v2/a/b/manifests/sha256:untagged", "Bearer delete", 202, ""},
		// Whoever may not delete gets the registry's answer.
		{"/v2/a/b/manifests/sha256:sig", "Bearer push", 401, "UNAUTHORIZED"},
		{"/v2/a/b/manifests/sha256:sig", "", 401, "UNAUTHORIZED"},
	} {
		rec := serveGate(h, http.MethodDelete, c.path, c.auth)
		if rec.Code != c.want || !strings.Contains(rec.Body.String(), c.body) {
			t.Errorf("DELETE %s (%s): %d %s", c.path, c.auth, rec.Code, rec.Body)
		}
	}
}

// A caller who may not write to the repository learns nothing about which
// tags are frozen: its write of a frozen tag is answered exactly as its
// write of any other tag (the registry's 401 and challenge).
func TestGateFrozenTagRevealedOnlyToAuthorizedWriters(t *testing.T) {
	h := fakeRegistry(t)
	for _, method := range []string{http.MethodPut, http.MethodDelete} {
		for _, auth := range []string{"", "Bearer t", "bearer t", "Basic dTpw", "Bearer push", "Bearer delete", "Negotiate x"} {
			if (method == http.MethodPut && strings.HasSuffix(auth, "push")) || (method == http.MethodDelete && strings.HasSuffix(auth, "delete")) {
				continue
			}
			frozen := serveGate(h, method, "/v2/a/b/manifests/sha256-x.sig", auth)
			other := serveGate(h, method, "/v2/a/b/manifests/sha256-y.sig", auth)
			if frozen.Code != http.StatusUnauthorized || frozen.Code != other.Code || frozen.Body.String() != other.Body.String() ||
				frozen.Header().Get("WWW-Authenticate") != other.Header().Get("WWW-Authenticate") {
				t.Errorf("%s (%q): frozen tag %d %s, other tag %d %s", method, auth, frozen.Code, frozen.Body, other.Code, other.Body)
			}
		}
	}
}

// gatedAuthz is a testAuthz with a ContentGate that freezes one tag.
type gatedAuthz struct {
	*testAuthz
	frozen atomic.Value // string
}

func (a *gatedAuthz) ManifestDenied(context.Context, string, string) (bool, error) { return false, nil }
func (a *gatedAuthz) TagFrozen(_ context.Context, _, tag string) (bool, error) {
	f, _ := a.frozen.Load().(string)
	return f != "" && tag == f, nil
}

// call sends method path to the registry with an Authorization header
// (none when empty) and returns the whole answer.
func (e *testEnv) call(t *testing.T, method, path, auth string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// challenge is h's WWW-Authenticate with its actions in one order
// (distribution lists a scope's actions in map order).
func challenge(h http.Header) string {
	return strings.ReplaceAll(h.Get("WWW-Authenticate"), ":push,pull", ":pull,push")
}

// The embedded registry behind the gate: the signature manifest a frozen
// tag points at is not deleted by its digest even with a token that
// carries "delete", and callers who may not write learn nothing about
// which tags are frozen.
func TestGateHoldsOnEmbeddedRegistry(t *testing.T) {
	t.Parallel()
	var gate *gatedAuthz
	env := newTestEnvWith(t, nil, func(a *testAuthz) Authorizer {
		gate = &gatedAuthz{testAuthz: a}
		return gate
	})
	env.authz.add("publisher", "s3cret", appRepo, ActionPush, ActionPull)
	ctx := context.Background()
	publisher := &authn.Basic{Username: "publisher", Password: "s3cret"}
	push := func(tag string) string {
		t.Helper()
		ref, err := name.ParseReference(env.host+"/"+appRepo+":"+tag, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		img := ociImage(t, 512)
		if err := remote.Write(ref, img, env.opts(ctx, publisher)...); err != nil {
			t.Fatalf("push %s: %v", tag, err)
		}
		d, _ := img.Digest()
		return d.String()
	}
	imgDigest := push("v1")
	sigTag := "sha256-" + strings.TrimPrefix(imgDigest, "sha256:") + ".sig"
	sigDigest := push(sigTag)
	otherTag := "sha256-" + strings.Repeat("ab", 32) + ".sig"
	otherDigest := push(otherTag)
	gate.frozen.Store(sigTag)

	issue := func(repo string, actions ...string) string {
		tok, err := env.reg.TokenHandler().Issue(Subject{ID: "ci"}, []Scope{{Type: "repository", Name: repo, Actions: actions}})
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok.Token
	}
	all := issue(appRepo, ActionPull, ActionPush, ActionDelete)
	manifests := "/v2/" + appRepo + "/manifests/"

	t.Run("delete by digest of a frozen tag's manifest", func(t *testing.T) {
		if code, _, body := env.call(t, http.MethodDelete, manifests+sigDigest, all); code != http.StatusForbidden || !strings.Contains(body, "DENIED") {
			t.Fatalf("DELETE by digest = %d %s, want 403 DENIED", code, body)
		}
		if code, _, body := env.call(t, http.MethodDelete, manifests+sigTag, all); code != http.StatusForbidden || !strings.Contains(body, "DENIED") {
			t.Fatalf("DELETE by tag = %d %s, want 403 DENIED", code, body)
		}
		if _, _, err := env.reg.ManifestExists(ctx, appRepo, sigDigest); err != nil {
			t.Fatalf("the signature manifest is gone: %v", err)
		}
		if d, err := env.reg.ResolveTag(ctx, appRepo, sigTag); err != nil || d != sigDigest {
			t.Fatalf("the frozen tag resolves to %q, %v; want %s", d, err, sigDigest)
		}
	})

	t.Run("unauthorized writers get the registry's answer", func(t *testing.T) {
		for _, method := range []string{http.MethodPut, http.MethodDelete} {
			for _, auth := range []string{
				"", "Bearer not-a-token", "bearer not-a-token", "Basic cHVibGlzaGVyOnMzY3JldA==",
				issue(appRepo, ActionPull), issue(otherRepo, ActionPull, ActionPush, ActionDelete),
			} {
				fc, fh, fb := env.call(t, method, manifests+sigTag, auth)
				oc, oh, ob := env.call(t, method, manifests+otherTag, auth)
				if fc != http.StatusUnauthorized || challenge(fh) == "" || fc != oc || fb != ob || challenge(fh) != challenge(oh) {
					t.Errorf("%s %.20q: frozen tag %d %s %v, other tag %d %s %v", method, auth, fc, fb, fh, oc, ob, oh)
				}
			}
		}
		// A token that may push but not delete is refused the delete by
		// the registry, frozen tag or not.
		pusher := issue(appRepo, ActionPull, ActionPush)
		fc, _, fb := env.call(t, http.MethodDelete, manifests+sigTag, pusher)
		oc, _, ob := env.call(t, http.MethodDelete, manifests+otherTag, pusher)
		if fc != http.StatusUnauthorized || fc != oc || fb != ob {
			t.Errorf("DELETE with push only: frozen tag %d %s, other tag %d %s", fc, fb, oc, ob)
		}
	})

	t.Run("an authorized pusher is told the tag is frozen", func(t *testing.T) {
		code, _, body := env.call(t, http.MethodPut, manifests+sigTag, issue(appRepo, ActionPull, ActionPush))
		if code != http.StatusForbidden || !strings.Contains(body, "can no longer be changed") {
			t.Fatalf("PUT of the frozen tag = %d %s, want 403", code, body)
		}
	})

	t.Run("other manifests are deleted by digest", func(t *testing.T) {
		if code, _, body := env.call(t, http.MethodDelete, manifests+otherDigest, all); code != http.StatusAccepted {
			t.Fatalf("DELETE of an unfrozen signature = %d %s, want 202", code, body)
		}
		if code, _, body := env.call(t, http.MethodDelete, manifests+imgDigest, all); code != http.StatusAccepted {
			t.Fatalf("DELETE of the image = %d %s, want 202", code, body)
		}
	})
}
