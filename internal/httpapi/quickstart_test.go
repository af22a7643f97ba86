package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/signature"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// The platform quickstart, end to end across domains: a project service
// account publishes and registers a signed image through the embedded
// registry; the admin verifies and promotes it; the catalog refuses to
// publish the version until its artifact is active and verified; after
// entitlement the service account previews a launch.
func TestQuickstartWalk(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		testQuickstartWalk(t, d)
	})
}

func testQuickstartWalk(t *testing.T, d store.Dialect) {
	ctx := context.Background()
	s := servertest.Start(t, d)
	admin := s.Admin()
	pid := s.Creds.ProjectID
	arts := "/api/v1/projects/" + pid + "/app-artifacts"

	// Step 2-3: a service account for automation, and its short-lived token.
	sa := admin.Do("POST", "/api/v1/projects/"+pid+"/service-accounts",
		map[string]any{"name": "app operator", "slug": "app-operator", "description": "quickstart"}).Want(t, 201)
	key := client.KeyFile{Type: client.KeyFileType, ServiceAccountID: sa.String("id"), KeyID: sa.String("key_id"),
		PrivateKeyPEM: sa.String("private_key_pem"), TokenURL: sa.String("token_url")}
	bot := s.AsServiceAccount(key)

	// The project's signing key (a project admin's job).
	signer, pubPEM := mustKeyPair(t, signature.AlgEd25519)
	keyID := admin.Do("POST", "/api/v1/projects/"+pid+"/artifact-signing-keys", map[string]string{"name": "ci", "public_key": string(pubPEM)}).Want(t, 201).String("id")

	// With a key registered, publishers cannot opt out of signing.
	if r := bot.Do("POST", arts+"/publish-intents", map[string]any{"app_slug": "flow-app", "app_version": "1.0.0", "artifact_name": "runtime",
		"signature_required": false}).Want(t, 400); !strings.Contains(string(r.Body), "required_by_project") {
		t.Fatalf("opting out of signatures: %s", r.Body)
	}

	// Step 6a: the bot asks for a publish intent, pushes by itself, signs, registers.
	pi := bot.Do("POST", arts+"/publish-intents", map[string]any{"app_slug": "flow-app", "app_version": "1.0.0", "artifact_name": "runtime", "channel": "dev"},
		"X-Idempotency-Key", "intent-1").Want(t, 201)
	// A replay of the keyed request never hands the single-use token out again,
	// and the stored response does not hold it either.
	replay := bot.Do("POST", arts+"/publish-intents", map[string]any{"app_slug": "flow-app", "app_version": "1.0.0", "artifact_name": "runtime", "channel": "dev"},
		"X-Idempotency-Key", "intent-1").Want(t, 201)
	if replay.Header.Get("Idempotent-Replayed") != "true" || replay.String("credential_delivery") != "withheld" || wrapToken(replay) != "" || replay.String("id") != pi.String("id") {
		t.Fatalf("replayed intent: %s", replay.Body)
	}
	rec, err := s.DB.Queries().GetIdempotencyRecord(ctx, "service_account:"+sa.String("id"), "intent-1")
	if err != nil || strings.Contains(string(rec.Body), wrapToken(pi)) {
		t.Fatalf("the stored idempotent response holds the wrapping token (%v)", err)
	}
	creds := unwrap(t, bot, wrapToken(pi))
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(creds.registry + "/" + creds.repo + ":1.0.0")
	if err := remote.Write(ref, img, creds.opts(ctx)...); err != nil {
		t.Fatalf("push: %v", err)
	}
	dg, _ := img.Digest()
	rd, err := signature.ParseRepoDigest(creds.registry+"/"+creds.repo+"@"+dg.String(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signature.SignImage(ctx, rd, signer, keyID, signature.Options{Remote: creds.opts(ctx)}); err != nil {
		t.Fatal(err)
	}
	art := bot.Do("POST", arts, map[string]any{"app_slug": "flow-app", "app_version": "1.0.0", "artifact_name": "runtime",
		"repository": creds.repo, "digest": dg.String(), "tag": "1.0.0", "media_type": "application/vnd.docker.distribution.manifest.v2+json"}).Want(t, 201)
	artID := art.String("id")
	// The bot's role operates artifacts but does not promote them.
	bot.Do("POST", arts+"/"+artID+"/promote", map[string]string{"reason": "ship it"}).Want(t, 403)

	// The platform admin registers the manifest that names this artifact.
	imageRef := creds.registry + "/" + creds.repo + "@" + dg.String()
	manifest := map[string]any{
		"slug": "flow-app", "display_name": "Flow App", "version": "1.0.0", "runtime_backend": "launchable_oci",
		"supported_modes": map[string]any{"operating_modes": []string{"tenant_dedicated"}, "control_plane_scopes": []string{"project"}},
		"artifacts":       []map[string]any{{"name": "runtime", "artifact_kind": "oci", "source_type": "oci_registry", "repository": creds.repo}},
		"runtime_profile": map[string]any{"kind": "launchable_oci", "image_ref": imageRef, "command": []string{"/app"},
			"resources": map[string]any{"gpu_count": map[string]any{"default": 1, "min": 1, "max": 2}}},
	}
	admin.Do("POST", "/api/v1/admin/apps/manifests", manifest).Want(t, 201)
	publish := "/api/v1/admin/apps/catalog/flow-app/versions/1.0.0/publish"
	r := admin.Do("POST", publish, map[string]string{"reason": "release"}).Want(t, 409)
	if r.ErrorCode() != "artifacts_not_ready" {
		t.Fatalf("publish before the artifact is active: %s", r.Body)
	}
	// The refusal explains itself: per expected artifact, the manifest's pin
	// and what is registered (state, trust, digest, repository).
	for _, want := range []string{`"name":"runtime"`, `"expected_repository":"` + creds.repo + `"`, `"id":"` + artID + `"`,
		`"lifecycle_state":"draft"`, `"trust_state":"unverified"`, `"digest":"` + dg.String() + `"`, `"repository":"` + creds.repo + `"`, "verify it and promote it"} {
		if !strings.Contains(string(r.Body), want) {
			t.Fatalf("publish refusal lacks %s: %s", want, r.Body)
		}
	}

	// Verify and promote the artifact, then publishing goes through.
	if r := admin.Do("POST", arts+"/"+artID+"/verify", map[string]string{"reason": "ci"}).Want(t, 200); r.String("trust_state") != "verified" {
		t.Fatalf("verify: %s", r.Body)
	}
	for _, target := range []string{"staged", "canary", "active"} {
		admin.Do("POST", arts+"/"+artID+"/promote", map[string]string{"target_state": target, "reason": "rollout"}).Want(t, 200)
	}
	admin.Do("POST", publish, map[string]string{"reason": "release"}).Want(t, 200)

	// Step 5: entitle the project; step 6: the bot previews a launch.
	preview := "/api/v1/projects/" + pid + "/apps/catalog/flow-app/versions/1.0.0/launch-preview"
	bot.Do("POST", preview, map[string]any{}).Want(t, 409)
	admin.Do("PUT", "/api/v1/projects/"+pid+"/apps/entitlements/flow-app", map[string]any{"enabled": true,
		"policy_overrides": map[string]any{"allowed_operating_modes": []string{"tenant_dedicated"}, "allowed_control_plane_scopes": []string{"project"}}}).Want(t, 200)
	bot.Do("PUT", "/api/v1/projects/"+pid+"/apps/entitlements/flow-app", map[string]any{"enabled": false}).Want(t, 403)
	eff := bot.Do("POST", preview, map[string]any{"operating_mode": "tenant_dedicated"}).Want(t, 200)
	if !strings.Contains(string(eff.Body), `"runtime_backend":"launchable_oci"`) || !strings.Contains(string(eff.Body), `"control_plane_scope":"project"`) {
		t.Fatalf("effective values: %s", eff.Body)
	}
	if r := bot.Do("POST", preview, map[string]any{"resources": map[string]any{"gpu_count": 3}}); r.Status < 400 {
		t.Fatalf("gpu bound not enforced: %s", r.Body)
	}

	// Pull intents for the node side; revoking the artifact ends them.
	pull := bot.Do("POST", arts+"/"+artID+"/pull-intents", map[string]any{}).Want(t, 201)
	if pull.String("digest") != dg.String() {
		t.Fatalf("pull intent: %s", pull.Body)
	}
	admin.Do("POST", arts+"/"+artID+"/revoke", map[string]string{"reason": "key compromised"}).Want(t, 200)
	bot.Do("POST", arts+"/"+artID+"/pull-intents", map[string]any{}).Want(t, 409)

	// The bot never leaves its project.
	other := admin.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/projects", map[string]string{"slug": "elsewhere", "name": "Elsewhere"}).Want(t, 201).String("id")
	bot.Do("POST", "/api/v1/projects/"+other+"/app-artifacts/publish-intents", map[string]any{"app_slug": "flow-app", "app_version": "1.0.0", "artifact_name": "runtime"}).Want(t, 404)
	bot.Do("GET", "/api/v1/projects/"+other+"/app-artifacts", nil).Want(t, 404)
}
