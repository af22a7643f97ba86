package httpapi_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// Revocation is the project's, not one repository's: a digest revoked
// through one app's artifact is no longer served from another app's
// repository of the same project where the same image was pushed (and
// never registered), by digest, through a tag or as a blob; the other
// images there are served as before.
func TestArtifactRevocationCoversProjectRepositories(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		testArtifactRevocationCoversProjectRepositories(t, d)
	})
}

func testArtifactRevocationCoversProjectRepositories(t *testing.T, d store.Dialect) {
	ctx := context.Background()
	s := servertest.Start(t, d)
	admin := s.Admin()
	base := "/api/v1/projects/" + s.Creds.ProjectID + "/app-artifacts"
	host := admin.Do("GET", "/api/v1/apps/registry", nil).Want(t, 200).String("registry_host")
	intent := func(app string) (string, regCreds) {
		return publishIntent(t, admin, s.Creds.ProjectID, map[string]any{"app_slug": app, "app_version": "1.0.0", "artifact_name": "runtime"})
	}
	repoA, cA := intent("alpha")
	repoB, cB := intent("beta")
	if repoA == repoB {
		t.Fatalf("two apps share repository %s", repoA)
	}
	img, _ := random.Image(1024, 2)
	dg, _ := img.Digest()
	digest := dg.String()
	other, _ := random.Image(512, 1)
	refA, _ := name.ParseReference(host + "/" + repoA + ":1.0.0")
	refB, _ := name.ParseReference(host + "/" + repoB + ":1.0.0")
	otherB, _ := name.ParseReference(host + "/" + repoB + ":other")
	byDigestB, _ := name.ParseReference(host + "/" + repoB + "@" + digest)
	for ref, c := range map[name.Reference]regCreds{refA: cA, refB: cB} {
		if err := remote.Write(ref, img, c.opts(ctx)...); err != nil {
			t.Fatalf("push %s: %v", ref, err)
		}
	}
	if err := remote.Write(otherB, other, cB.opts(ctx)...); err != nil {
		t.Fatalf("push %s: %v", otherB, err)
	}
	if _, err := remote.Get(byDigestB, cB.opts(ctx)...); err != nil {
		t.Fatalf("pull from the second repository before revocation: %v", err)
	}

	a := admin.Do("POST", base, map[string]any{"app_slug": "alpha", "app_version": "1.0.0", "artifact_name": "runtime",
		"repository": repoA, "digest": digest, "tag": "1.0.0"}).Want(t, 201).String("id")
	admin.Do("POST", base+"/"+a+"/revoke", map[string]string{"reason": "compromised build"}).Want(t, 200)
	if r := admin.Do("POST", base, map[string]any{"app_slug": "beta", "app_version": "1.0.0", "artifact_name": "runtime",
		"repository": repoB, "digest": digest}); r.Status != 422 || r.ErrorCode() != "digest_revoked" {
		t.Fatalf("registration in the second repository: want 422 digest_revoked, got %d %s", r.Status, r.Body)
	}

	// The second repository's live publish credentials, and fresh ones.
	_, fresh := intent("beta")
	for who, c := range map[string]regCreds{"publish credentials": cB, "fresh publish credentials": fresh} {
		for what, ref := range map[string]name.Reference{"by digest": byDigestB, "by tag": refB} {
			_, err := remote.Get(ref, c.opts(ctx)...)
			var terr *transport.Error
			if !errors.As(err, &terr) || terr.StatusCode != http.StatusNotFound || len(terr.Errors) == 0 || terr.Errors[0].Code != transport.ManifestUnknownErrorCode {
				t.Fatalf("%s pulled the revoked digest from the second repository %s: %v, want 404 MANIFEST_UNKNOWN", who, what, err)
			}
		}
		// A manifest is a blob of its repository too.
		blob, err := name.NewDigest(host + "/" + repoB + "@" + digest)
		if err != nil {
			t.Fatal(err)
		}
		l, err := remote.Layer(blob, c.opts(ctx)...)
		if err == nil {
			var rc io.ReadCloser
			if rc, err = l.Compressed(); err == nil {
				rc.Close()
			}
		}
		var terr *transport.Error
		if !errors.As(err, &terr) || terr.StatusCode != http.StatusNotFound || len(terr.Errors) == 0 || terr.Errors[0].Code != transport.BlobUnknownErrorCode {
			t.Fatalf("%s read the revoked manifest from the second repository as a blob: %v, want 404 BLOB_UNKNOWN", who, err)
		}
		if _, err := remote.Get(otherB, c.opts(ctx)...); err != nil {
			t.Fatalf("%s: unrevoked image of the second repository: %v", who, err)
		}
	}
}
