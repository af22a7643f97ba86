package httpapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/signature"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// Registration refuses what is not the pushed manifest (a layer digest, a
// tag naming another digest); a verified digest's signature tag cannot be
// rewritten by another version's intent; revoking one record revokes the
// digest for every record, every future registration and every credential.
func TestArtifactDigestTruth(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		testArtifactDigestTruth(t, d)
	})
}

func testArtifactDigestTruth(t *testing.T, d store.Dialect) {
	ctx := context.Background()
	s := servertest.Start(t, d)
	admin := s.Admin()
	pid := s.Creds.ProjectID
	base := "/api/v1/projects/" + pid + "/app-artifacts"
	host := admin.Do("GET", "/api/v1/apps/registry", nil).Want(t, 200).String("registry_host")
	privPEM, pubPEM := mustKeyPair(t, signature.AlgECDSAP256)
	otherPriv, _ := mustKeyPair(t, signature.AlgEd25519)
	key := admin.Do("POST", "/api/v1/projects/"+pid+"/artifact-signing-keys", map[string]string{"name": "ci", "public_key": string(pubPEM)}).Want(t, 201)

	intent := func(version string) (string, regCreds) {
		return publishIntent(t, admin, pid, map[string]any{"app_slug": "demo", "app_version": version, "artifact_name": "runtime"})
	}
	reg := func(version, repo, digest, tag string) *servertest.Response {
		return admin.Do("POST", base, map[string]any{"app_slug": "demo", "app_version": version, "artifact_name": "runtime", "repository": repo, "digest": digest, "tag": tag})
	}
	wantErr := func(r *servertest.Response, status int, code, what string) {
		t.Helper()
		if r.Status != status || r.ErrorCode() != code {
			t.Fatalf("%s: want %d %s, got %d %s", what, status, code, r.Status, r.Body)
		}
	}

	repo, c1 := intent("1.0.0")
	img, _ := random.Image(1024, 2)
	ref, _ := name.ParseReference(host + "/" + repo + ":1.0.0")
	if err := remote.Write(ref, img, c1.opts(ctx)...); err != nil {
		t.Fatal(err)
	}
	other, _ := random.Image(512, 1)
	otherRef, _ := name.ParseReference(host + "/" + repo + ":other")
	if err := remote.Write(otherRef, other, c1.opts(ctx)...); err != nil {
		t.Fatal(err)
	}
	dg, _ := img.Digest()
	digest := dg.String()

	// A layer is a blob in the repository, not a manifest.
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	wantErr(reg("1.0.0", repo, ld.String(), ""), 422, "manifest_not_found", "layer digest")
	cfg, _ := img.ConfigName()
	wantErr(reg("1.0.0", repo, cfg.String(), ""), 422, "manifest_not_found", "config digest")
	// A tag must name the registered digest.
	wantErr(reg("1.0.0", repo, digest, "other"), 422, "tag_mismatch", "tag of another image")
	wantErr(reg("1.0.0", repo, digest, "missing"), 422, "tag_mismatch", "unknown tag")

	a := reg("1.0.0", repo, digest, "1.0.0").Want(t, 201).String("id")
	rd, err := signature.ParseRepoDigest(host+"/"+repo+"@"+digest, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signature.SignImage(ctx, rd, privPEM, key.String("id"), signature.Options{Remote: c1.opts(ctx)}); err != nil {
		t.Fatal(err)
	}
	verify := func(id, want string) {
		t.Helper()
		if r := admin.Do("POST", base+"/"+id+"/verify", map[string]string{"reason": "check"}).Want(t, 200); r.String("trust_state") != want {
			t.Fatalf("verify %s: want %s, got %s", id, want, r.Body)
		}
	}
	verify(a, "verified")

	// Another version's publish credentials cover the same repository, but
	// not the verified digest's signature tag.
	_, c2 := intent("2.0.0")
	if _, err := signature.SignImage(ctx, rd, otherPriv, "stranger", signature.Options{Remote: c2.opts(ctx)}); err == nil {
		t.Fatal("a foreign intent rewrote the signature tag of a verified digest")
	}
	verify(a, "verified")

	// The same digest registered under a second version, and pull credentials for the first.
	b := reg("2.0.0", repo, digest, "").Want(t, 201).String("id")
	pc := unwrap(t, admin, wrapToken(admin.Do("POST", base+"/"+a+"/pull-intents", map[string]any{}).Want(t, 201)))
	byDigest, _ := name.ParseReference(host + "/" + repo + "@" + digest)
	if _, err := remote.Get(byDigest, pc.opts(ctx)...); err != nil {
		t.Fatalf("pull before revocation: %v", err)
	}

	admin.Do("POST", base+"/"+a+"/revoke", map[string]string{"reason": "compromised build"}).Want(t, 200)
	if r := admin.Do("GET", base+"/"+b, nil).Want(t, 200); r.JSON["revoked"] != true {
		t.Fatalf("record %s with the revoked digest is not revoked: %s", b, r.Body)
	}
	wantErr(admin.Do("POST", base+"/"+b+"/promote", map[string]string{"reason": "ship"}), 409, "artifact_revoked", "promote the other record")
	wantErr(admin.Do("POST", base+"/"+b+"/pull-intents", map[string]any{}), 409, "artifact_revoked", "pull intent for the other record")
	// A record whose registration raced the revoke (inserted unrevoked
	// behind the API's back) is still treated as revoked by every gate.
	raced, err := s.DB.Queries().GetAppArtifact(ctx, pid, b)
	if err != nil {
		t.Fatal(err)
	}
	raced.ID, raced.AppVersion, raced.RevokedAt, raced.RevokeReason = uuid.NewString(), "9.0.0", time.Time{}, ""
	if err := s.DB.Queries().InsertAppArtifact(ctx, raced); err != nil {
		t.Fatal(err)
	}
	if r := admin.Do("GET", base+"/"+raced.ID, nil).Want(t, 200); r.JSON["revoked"] != true {
		t.Fatalf("raced record not shown revoked: %s", r.Body)
	}
	wantErr(admin.Do("POST", base+"/"+raced.ID+"/promote", map[string]string{"reason": "ship"}), 409, "artifact_revoked", "promote the raced record")
	wantErr(admin.Do("POST", base+"/"+raced.ID+"/pull-intents", map[string]any{}), 409, "artifact_revoked", "pull intent for the raced record")

	_, c3 := intent("3.0.0")
	wantErr(reg("3.0.0", repo, digest, ""), 422, "digest_revoked", "re-registration")

	// No credential pulls the revoked manifest, by digest or by tag:
	// neither the pull intent's nor a live publish intent's.
	for who, c := range map[string]regCreds{"pull credentials": pc, "publish credentials": c3} {
		if _, err := remote.Get(byDigest, c.opts(ctx)...); err == nil {
			t.Fatalf("%s pulled the revoked digest", who)
		}
		if _, err := remote.Head(ref, c.opts(ctx)...); err == nil {
			t.Fatalf("%s resolved a tag to the revoked digest", who)
		}
	}
	// Other content of the repository is still served.
	if _, err := remote.Get(otherRef, c3.opts(ctx)...); err != nil {
		t.Fatalf("unrevoked image: %v", err)
	}
}
