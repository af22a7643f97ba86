package httpapi_test

import (
	"context"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/signature"
	"github.com/gpuaas/gpuaas/internal/store"
)

// An image published while the project had no signing key verifies by its
// digest alone; once the project registers a key, the same image must be
// signed to verify — the project's keys decide, not the old intent.
func TestProjectKeysDecideWhetherSignaturesAreRequired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	pid := s.Creds.ProjectID
	arts := "/api/v1/projects/" + pid + "/app-artifacts"

	pi := admin.Do("POST", arts+"/publish-intents", map[string]any{"app_slug": "late", "app_version": "1.0.0", "artifact_name": "runtime"}).Want(t, 201)
	if pi.JSON["signature_required"] != false {
		t.Fatalf("a project without keys requires signatures: %s", pi.Body)
	}
	creds := unwrap(t, admin, wrapToken(pi))
	img, _ := random.Image(512, 1)
	ref, _ := name.ParseReference(creds.registry + "/" + creds.repo + ":1.0.0")
	if err := remote.Write(ref, img, creds.opts(ctx)...); err != nil {
		t.Fatal(err)
	}
	dg, _ := img.Digest()
	id := admin.Do("POST", arts, map[string]any{"app_slug": "late", "app_version": "1.0.0", "artifact_name": "runtime",
		"repository": creds.repo, "digest": dg.String()}).Want(t, 201).String("id")
	if r := admin.Do("POST", arts+"/"+id+"/verify", map[string]string{"reason": "no keys yet"}).Want(t, 200); r.String("trust_state") != "verified" {
		t.Fatalf("unsigned image in a keyless project: %s", r.Body)
	}

	signer, pub := mustKeyPair(t, signature.AlgECDSAP256)
	keyID := admin.Do("POST", "/api/v1/projects/"+pid+"/artifact-signing-keys", map[string]string{"name": "ci", "public_key": string(pub)}).Want(t, 201).String("id")
	if r := admin.Do("POST", arts+"/"+id+"/verify", map[string]string{"reason": "keys now"}).Want(t, 200); r.String("trust_state") != "failed" || r.String("trust_reason") != "signature_missing" {
		t.Fatalf("unsigned image after the project registered a key: %s", r.Body)
	}
	rd, err := signature.ParseRepoDigest(creds.registry+"/"+creds.repo+"@"+dg.String(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	// The intent's credentials expired with it; sign with a fresh pull+push grant.
	pi2 := admin.Do("POST", arts+"/publish-intents", map[string]any{"app_slug": "late", "app_version": "1.0.1", "artifact_name": "runtime"}).Want(t, 201)
	creds2 := unwrap(t, admin, wrapToken(pi2))
	if _, err := signature.SignImage(ctx, rd, signer, keyID, signature.Options{Remote: creds2.opts(ctx)}); err != nil {
		t.Fatal(err)
	}
	if r := admin.Do("POST", arts+"/"+id+"/verify", map[string]string{"reason": "signed"}).Want(t, 200); r.String("trust_state") != "verified" {
		t.Fatalf("signed image: %s", r.Body)
	}
}
