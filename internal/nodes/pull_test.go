package nodes_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// Pull credentials issued to a node unwrap only for that node: another
// node, or a person, is told the token does not exist, and the token still
// works for its node afterwards. What it unwraps is pull-only for the one
// repository of the artifact's project.
func TestNodePullCredentialsAreBoundToTheNode(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		admin := s.Admin()
		a := join(t, s, admin, "puller", 0)
		b := join(t, s, admin, "thief", 0)
		ctx := context.Background()
		p, err := s.DB.Queries().GetProject(ctx, s.Creds.ProjectID)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		art := artifacts.AppArtifact{ID: iam.NewID(), OrgID: p.OrgID, ProjectID: p.ID, AppSlug: "demo", AppVersion: "1.0.0", ArtifactName: "runtime",
			ArtifactKind: "oci", SourceType: "oci_registry", Repository: "gpuaas/apps/x/y/demo", Digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			LifecycleState: "draft", TrustState: "unverified", CreatedBy: "test", CreatedAt: now, UpdatedAt: now}
		if err := s.DB.Queries().InsertAppArtifact(ctx, art); err != nil {
			t.Fatal(err)
		}
		it, err := s.App.API.Artifacts.CreateNodePullIntent(ctx, a.id, p.ID, art.ID)
		if err != nil {
			t.Fatal(err)
		}
		pull := it.ImagePull()
		if pull.Digest != art.Digest || pull.WrappingToken == "" {
			t.Fatalf("payload %+v", pull)
		}
		body := map[string]string{"wrapping_token": pull.WrappingToken}
		if r := b.c.Do("POST", "/api/v1/apps/registry/unwrap", body); r.Status != 409 || r.ErrorCode() != "wrapping_token_invalid" {
			t.Fatalf("other node unwrapped: %d %s", r.Status, r.Body)
		}
		if r := admin.Do("POST", "/api/v1/apps/registry/unwrap", body); r.Status != 409 {
			t.Fatalf("admin unwrapped a node's credentials: %d %s", r.Status, r.Body)
		}
		got := a.c.Do("POST", "/api/v1/apps/registry/unwrap", body).Want(t, 200)
		if got.String("repository") != art.Repository {
			t.Fatalf("unwrapped %s", got.Body)
		}
		if acts := got.JSON["actions"].([]any); len(acts) != 1 || acts[0] != "pull" {
			t.Fatalf("actions %v", acts)
		}
		// A node's credentials never unwrap what was issued to someone else.
		pi := admin.Do("POST", "/api/v1/projects/"+p.ID+"/app-artifacts/publish-intents",
			map[string]any{"app_slug": "demo", "app_version": "2.0.0", "artifact_name": "runtime", "signature_required": false}).Want(t, 201)
		w, _ := pi.JSON["wrapped_credentials"].(map[string]any)
		tok, _ := w["wrapping_token"].(string)
		if r := a.c.Do("POST", "/api/v1/apps/registry/unwrap", map[string]string{"wrapping_token": tok}); r.Status != 409 {
			t.Fatalf("node unwrapped a person's push credentials: %d %s", r.Status, r.Body)
		}
	})
}
