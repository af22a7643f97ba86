package registry

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

type fakeGate struct {
	denied, frozen string
	asked          *atomic.Int64 // ManifestDenied calls, when not nil
}

func (g fakeGate) ManifestDenied(_ context.Context, _, d string) (bool, error) {
	if g.asked != nil {
		g.asked.Add(1)
	}
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

// fakeRegistry stands in for the registry behind the gate: "Bearer pull"
// may GET and HEAD, "Bearer push" may PUT and "Bearer delete" may DELETE
// (the scheme in any case, as the registry reads it); any other request
// gets the registry's 401 challenge. The manifest sha256:sig is tagged
// sha256-x.sig, sha256:img is tagged 1.0.0.
func fakeRegistry(t *testing.T) *gateHandler {
	authorized := func(r *http.Request, _ string) bool {
		scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "bearer") {
			return false
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			return tok == "pull"
		case http.MethodPut:
			return tok == "push"
		case http.MethodDelete:
			return tok == "delete"
		}
		return false
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorized(r, "") {
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
		{"GET", "/v2/a/b/manifests/good", "Bearer pull", 200, "manifest"},
		{"GET", "/v2/a/b/manifests/bad", "Bearer pull", 404, "MANIFEST_UNKNOWN"},
		{"HEAD", "/v2/a/b/manifests/sha256:bad", "Bearer pull", 404, ""},
		// A revoked manifest read as a blob of its repository is refused
		// too; other blobs pass.
		{"GET", "/v2/a/b/blobs/sha256:bad", "Bearer pull", 404, "BLOB_UNKNOWN"},
		{"HEAD", "/v2/a/b/blobs/sha256:bad", "bearer pull", 404, ""},
		{"GET", "/v2/a/b/blobs/sha256:good", "Bearer pull", 200, "manifest"},
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

// A caller who may not pull from the repository learns nothing about
// which digests are revoked: its read of a revoked manifest's blob is
// answered exactly as its read of any other blob (the registry's 401 and
// challenge), and the gate is not asked.
func TestGateRevokedBlobRevealedOnlyToPullers(t *testing.T) {
	h := fakeRegistry(t)
	var asked atomic.Int64
	h.gate = fakeGate{denied: "sha256:bad", frozen: "sha256-x.sig", asked: &asked}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		for _, auth := range []string{"", "Bearer t", "bearer t", "Basic dTpw", "Bearer push", "Bearer delete", "Negotiate x"} {
			revoked := serveGate(h, method, "/v2/a/b/blobs/sha256:bad", auth)
			other := serveGate(h, method, "/v2/a/b/blobs/sha256:good", auth)
			if revoked.Code != http.StatusUnauthorized || revoked.Code != other.Code || revoked.Body.String() != other.Body.String() ||
				revoked.Header().Get("WWW-Authenticate") == "" || revoked.Header().Get("WWW-Authenticate") != other.Header().Get("WWW-Authenticate") {
				t.Errorf("%s (%q): revoked blob %d %s, other blob %d %s", method, auth, revoked.Code, revoked.Body, other.Code, other.Body)
			}
		}
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the gate was asked %d times about unauthorized reads", n)
	}
	if rec := serveGate(h, http.MethodGet, "/v2/a/b/blobs/sha256:bad", "Bearer pull"); rec.Code != http.StatusNotFound || asked.Load() != 1 {
		t.Errorf("a puller's read of the revoked blob = %d %s (gate asked %d times), want 404 after one question", rec.Code, rec.Body, asked.Load())
	}
}

// gatedAuthz is a testAuthz with a ContentGate that freezes one tag and
// denies one digest.
type gatedAuthz struct {
	*testAuthz
	frozen atomic.Value // string
	denied atomic.Value // string
	asked  atomic.Int64 // ManifestDenied calls
}

// newGatedEnv is an embedded registry behind a gatedAuthz, with the
// publisher credentials (push and pull on appRepo).
func newGatedEnv(t *testing.T) (*testEnv, *gatedAuthz) {
	t.Helper()
	var gate *gatedAuthz
	env := newTestEnvWith(t, nil, func(a *testAuthz) Authorizer {
		gate = &gatedAuthz{testAuthz: a}
		return gate
	})
	env.authz.add("publisher", "s3cret", appRepo, ActionPush, ActionPull)
	return env, gate
}

// pushAsPublisher pushes an image of size bytes to appRepo:tag with the
// publisher credentials.
func pushAsPublisher(t *testing.T, env *testEnv, tag string, size int64) v1.Image {
	t.Helper()
	ref, err := name.ParseReference(env.host+"/"+appRepo+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img := ociImage(t, size)
	if err := remote.Write(ref, img, env.opts(context.Background(), &authn.Basic{Username: "publisher", Password: "s3cret"})...); err != nil {
		t.Fatalf("push %s: %v", tag, err)
	}
	return img
}

func (a *gatedAuthz) ManifestDenied(_ context.Context, _, d string) (bool, error) {
	a.asked.Add(1)
	denied, _ := a.denied.Load().(string)
	return denied != "" && d == denied, nil
}
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
	env, gate := newGatedEnv(t)
	ctx := context.Background()
	push := func(tag string) string {
		t.Helper()
		d, _ := pushAsPublisher(t, env, tag, 512).Digest()
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

// The embedded registry behind the gate: a revoked manifest read as a blob
// is refused (404 BLOB_UNKNOWN) only to a token that may pull from the
// repository; without one, the registry's 401 and challenge answer, the
// same for the revoked digest as for any other, and the gate is not asked.
func TestGateRevokedBlobOnEmbeddedRegistry(t *testing.T) {
	t.Parallel()
	env, gate := newGatedEnv(t)
	img := pushAsPublisher(t, env, "v1", 512)
	d, _ := img.Digest()
	cfg, _ := img.ConfigName()
	gate.denied.Store(d.String())
	issue := func(repo string, actions ...string) string {
		tok, err := env.reg.TokenHandler().Issue(Subject{ID: "ci"}, []Scope{{Type: "repository", Name: repo, Actions: actions}})
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok.Token
	}
	blobs := "/v2/" + appRepo + "/blobs/"
	gate.asked.Store(0)
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		for _, auth := range []string{
			"", "Bearer not-a-token", "bearer not-a-token", "Basic cHVibGlzaGVyOnMzY3JldA==",
			issue(otherRepo, ActionPull, ActionPush, ActionDelete),
		} {
			rc, rh, rb := env.call(t, method, blobs+d.String(), auth)
			oc, oh, ob := env.call(t, method, blobs+cfg.String(), auth)
			if rc != http.StatusUnauthorized || challenge(rh) == "" || rc != oc || rb != ob || challenge(rh) != challenge(oh) {
				t.Errorf("%s %.20q: revoked digest %d %s %v, other digest %d %s %v", method, auth, rc, rb, rh, oc, ob, oh)
			}
		}
	}
	if n := gate.asked.Load(); n != 0 {
		t.Errorf("the gate was asked %d times about unauthorized blob reads", n)
	}
	pull := issue(appRepo, ActionPull)
	if code, _, body := env.call(t, http.MethodGet, blobs+d.String(), pull); code != http.StatusNotFound || !strings.Contains(body, "BLOB_UNKNOWN") {
		t.Fatalf("a puller's GET of the revoked manifest's blob = %d %s, want 404 BLOB_UNKNOWN", code, body)
	}
	if code, _, body := env.call(t, http.MethodGet, blobs+cfg.String(), pull); code != http.StatusOK {
		t.Fatalf("a puller's GET of another blob = %d %s, want 200", code, body)
	}
}

// A write of a signature tag is checked and written under the hold of the
// digest's DigestKey, after its whole body is in: while a verification
// holds the digest's tags, the write waits, and once the verification
// froze the tag it is refused, however early its headers came.
func TestGateSignatureTagWriteWaitsForVerification(t *testing.T) {
	t.Parallel()
	env, gate := newGatedEnv(t)
	ctx := context.Background()
	forged := pushAsPublisher(t, env, "forged", 256)
	body, _ := forged.RawManifest()
	mt, _ := forged.MediaType()
	digest := "sha256:" + strings.Repeat("cd", 32)
	tok, err := env.reg.TokenHandler().Issue(Subject{ID: "ci"}, []Scope{{Type: "repository", Name: appRepo, Actions: []string{ActionPull, ActionPush}}})
	if err != nil {
		t.Fatal(err)
	}
	put := func(tag string) chan int {
		done := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPut, env.srv.URL+"/v2/"+appRepo+"/manifests/"+tag, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok.Token)
			req.Header.Set("Content-Type", string(mt))
			resp, err := env.srv.Client().Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		return done
	}
	for _, tag := range []string{"sha256-" + strings.Repeat("cd", 32) + ".sig", "SHA256-" + strings.Repeat("CD", 32) + ".ATT"} {
		gate.frozen.Store("")
		release, err := HoldKeys(ctx, DigestKey(appRepo, digest))
		if err != nil {
			t.Fatal(err)
		}
		done := put(tag)
		select {
		case code := <-done:
			t.Fatalf("PUT %s answered %d while a verification held the digest's tags", tag, code)
		case <-time.After(300 * time.Millisecond):
		}
		gate.frozen.Store(strings.ToLower(tag))
		release()
		if code := <-done; code != http.StatusForbidden {
			t.Fatalf("PUT %s after the verification froze it = %d, want 403", tag, code)
		}
	}
	// Other tags, and signature tags of other digests, do not wait.
	release, err := HoldKeys(ctx, DigestKey(appRepo, digest))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	for _, tag := range []string{"v2", "sha256-" + strings.Repeat("ef", 32) + ".sig"} {
		select {
		case code := <-put(tag):
			if code != http.StatusCreated {
				t.Fatalf("PUT %s = %d, want 201", tag, code)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("PUT %s waited on another digest's verification", tag)
		}
	}
}

func TestHoldKeys(t *testing.T) {
	ctx := context.Background()
	release, err := HoldKeys(ctx, DigestKey("r", "d"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := HoldKeys(ctx, DigestKey("r", "e"))
	if err != nil {
		t.Fatal(err)
	}
	other()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := HoldKeys(short, DigestKey("r", "d")); err == nil {
		t.Fatal("a held key was taken twice")
	}
	release()
	release() // a second release is a no-op
	again, err := HoldKeys(ctx, DigestKey("r", "d"))
	if err != nil {
		t.Fatal(err)
	}
	again()
	wantNoKeysLeft(t)
}

// deleterGate is a fakeGate that refuses to delete one digest and records
// the deletes it let through and the refusals the gate handed it.
type deleterGate struct {
	fakeGate
	refused  string
	deleted  []string // subject@digest
	recorded []string // digest: refusal the gate decided
}

func (g *deleterGate) DeleteManifest(_ context.Context, subject, _, digest, refused string, _ IndexChildren, del func() bool) (string, error) {
	if refused != "" {
		g.recorded = append(g.recorded, digest+": "+refused)
		return refused, nil
	}
	if digest == g.refused {
		return "manifest " + digest + " is artifact a-1 (state draft); revoke it first", nil
	}
	if del() {
		g.deleted = append(g.deleted, subject+"@"+digest)
	}
	return "", nil
}

// A delete by digest the token allows is the gate's ManifestDeleter's to
// refuse (403 DENIED with its reason, the registry never asked) or to pass
// on and record, with the token's subject; a frozen tag still refuses
// first, and a caller whose token may not delete gets the registry's 401
// without the gate being asked.
func TestGateManifestDeleterDecidesDeletes(t *testing.T) {
	h := fakeRegistry(t)
	g := &deleterGate{fakeGate: fakeGate{denied: "sha256:bad", frozen: "sha256-x.sig"}, refused: "sha256:img"}
	h.gate = g
	h.subject = func(*http.Request, string) string { return "credential:c-1" }
	for _, c := range []struct {
		path, auth string
		want       int
		body       string
	}{
		{"/v2/a/b/manifests/sha256:img", "Bearer delete", 403, "is artifact a-1 (state draft); revoke it first"},
		{"/v2/a/b/manifests/sha256:sig", "Bearer delete", 403, "can no longer be deleted"},
		{"/v2/a/b/manifests/sha256:img", "Bearer push", 401, "UNAUTHORIZED"},
		{"/v2/a/b/manifests/sha256:untagged", "Bearer delete", 202, ""},
		// A blob is not deleted on its own, whatever the token; one that
		// may not delete gets the registry's 401.
		{"/v2/a/b/blobs/sha256:layer", "Bearer delete", 405, "UNSUPPORTED"},
		{"/v2/a/b/blobs/sha256:layer", "Bearer push", 401, "UNAUTHORIZED"},
	} {
		rec := serveGate(h, http.MethodDelete, c.path, c.auth)
		if rec.Code != c.want || !strings.Contains(rec.Body.String(), c.body) {
			t.Errorf("DELETE %s (%s): %d %s", c.path, c.auth, rec.Code, rec.Body)
		}
		if c.want == 403 && !strings.Contains(rec.Body.String(), "DENIED") {
			t.Errorf("DELETE %s: %s, want the registry's DENIED", c.path, rec.Body)
		}
	}
	if len(g.deleted) != 1 || g.deleted[0] != "credential:c-1@sha256:untagged" {
		t.Errorf("recorded deletes %v, want the one of sha256:untagged by credential:c-1", g.deleted)
	}
	// The frozen tag's refusal is the deleter's to record (audited as
	// denied, as its own refusals are).
	if len(g.recorded) != 1 || !strings.HasPrefix(g.recorded[0], "sha256:sig: ") || !strings.Contains(g.recorded[0], "can no longer be deleted") {
		t.Errorf("refusals handed to the deleter %v, want the frozen tag's on sha256:sig", g.recorded)
	}
}
