package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/signature"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A write of a signature tag opened before verification and finished after
// it does not replace the signature the artifact was verified against: the
// gate checks the tag once the body is in, under the lock verification
// holds, so the write is refused (403 DENIED) and the artifact stays
// verified against the tag it read.
func TestArtifactSignatureTagWriteSpanningVerify(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		testArtifactSignatureTagWriteSpanningVerify(t, d)
	})
}

func testArtifactSignatureTagWriteSpanningVerify(t *testing.T, d store.Dialect) {
	ctx := context.Background()
	s := servertest.Start(t, d)
	admin := s.Admin()
	pid := s.Creds.ProjectID
	base := "/api/v1/projects/" + pid + "/app-artifacts"
	host := admin.Do("GET", "/api/v1/apps/registry", nil).Want(t, 200).String("registry_host")
	privPEM, pubPEM := mustKeyPair(t, signature.AlgECDSAP256)
	key := admin.Do("POST", "/api/v1/projects/"+pid+"/artifact-signing-keys", map[string]string{"name": "ci", "public_key": string(pubPEM)}).Want(t, 201)
	intent := func(version string) (string, regCreds) {
		return publishIntent(t, admin, pid, map[string]any{"app_slug": "demo", "app_version": version, "artifact_name": "runtime"})
	}

	repo, c1 := intent("1.0.0")
	img, _ := random.Image(1024, 2)
	ref, _ := name.ParseReference(host + "/" + repo + ":1.0.0")
	if err := remote.Write(ref, img, c1.opts(ctx)...); err != nil {
		t.Fatal(err)
	}
	// What the other intent will write over the signature tag: any
	// manifest the repository holds the blobs of.
	other, _ := random.Image(512, 1)
	otherRef, _ := name.ParseReference(host + "/" + repo + ":other")
	if err := remote.Write(otherRef, other, c1.opts(ctx)...); err != nil {
		t.Fatal(err)
	}
	forged, _ := other.RawManifest()
	forgedType, _ := other.MediaType()
	dg, _ := img.Digest()
	digest := dg.String()
	a := admin.Do("POST", base, map[string]any{"app_slug": "demo", "app_version": "1.0.0", "artifact_name": "runtime",
		"repository": repo, "digest": digest, "tag": "1.0.0"}).Want(t, 201).String("id")
	rd, err := signature.ParseRepoDigest(host+"/"+repo+"@"+digest, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signature.SignImage(ctx, rd, privPEM, key.String("id"), signature.Options{Remote: c1.opts(ctx)}); err != nil {
		t.Fatal(err)
	}
	sigTag := "sha256-" + strings.TrimPrefix(digest, "sha256:") + ".sig"
	sigRef, _ := name.ParseReference(host + "/" + repo + ":" + sigTag)
	signed, err := remote.Head(sigRef, c1.opts(ctx)...)
	if err != nil {
		t.Fatal(err)
	}

	// Another version's publisher opens a PUT of the signature tag while
	// the artifact is unverified and sends half of the body.
	_, c2 := intent("2.0.0")
	r, _ := name.NewRepository(host+"/"+repo, name.Insecure)
	rt, err := transport.NewWithContext(ctx, r.Registry, &authn.Basic{Username: c2.user, Password: c2.pass}, http.DefaultTransport,
		[]string{r.Scope(transport.PushScope)})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, r.Registry.Scheme()+"://"+host+"/v2/"+repo+"/manifests/"+sigTag, pr)
	req.Header.Set("Content-Type", string(forgedType))
	req.ContentLength = int64(len(forged))
	type answer struct {
		status int
		body   string
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := (&http.Client{Transport: rt}).Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- answer{status: resp.StatusCode, body: string(b)}
	}()
	if _, err := pw.Write(forged[:len(forged)/2]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the server has the headers and half the body

	// Verification reads the signature and freezes the tag; the PUT ends.
	if r := admin.Do("POST", base+"/"+a+"/verify", map[string]string{"reason": "check"}).Want(t, 200); r.String("trust_state") != "verified" {
		t.Fatalf("verify: %s", r.Body)
	}
	if _, err := io.Copy(pw, bytes.NewReader(forged[len(forged)/2:])); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var got answer
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the PUT did not end")
	}
	if got.err != nil || got.status != http.StatusForbidden || !strings.Contains(got.body, "DENIED") {
		t.Errorf("PUT of the signature tag across verification = %d %s %v, want 403 DENIED", got.status, got.body, got.err)
	}
	now, err := remote.Head(sigRef, c1.opts(ctx)...)
	if err != nil || now.Digest != signed.Digest {
		t.Fatalf("the verified digest's signature tag points at %v (%v), was %s", now, err, signed.Digest)
	}
	if r := admin.Do("POST", base+"/"+a+"/verify", map[string]string{"reason": "again"}).Want(t, 200); r.String("trust_state") != "verified" {
		t.Fatalf("verify again: %s", r.Body)
	}

	// The other side of the lock: a verification waits for a signature
	// tag write the gate has checked and not finished.
	release, err := registry.HoldKeys(ctx, registry.DigestKey(repo, digest))
	if err != nil {
		t.Fatal(err)
	}
	verified := make(chan *servertest.Response, 1)
	go func() {
		verified <- admin.Do("POST", base+"/"+a+"/verify", map[string]string{"reason": "while written"})
	}()
	select {
	case r := <-verified:
		release()
		t.Fatalf("verify answered %d while a signature tag write held the digest's tags", r.Status)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	select {
	case r := <-verified:
		if r.Status != 200 || r.String("trust_state") != "verified" {
			t.Fatalf("verify after the write: %d %s", r.Status, r.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("verify did not end after the write")
	}
}
