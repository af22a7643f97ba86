package artifacts_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// While the registry deletes a manifest no transaction of the delete is
// open (SQLite's one write lock held across the registry's storage I/O
// kept every other write of the platform waiting, up to failing at the
// busy timeout), and a delete that happened is audited even when the
// client went away meanwhile (the row was written in a transaction on the
// request's context, which a cancel rolled back after the manifest was
// gone).
func TestRegistryManifestDeleteHoldsNoTransactionAndOutlivesItsClient(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		clk, q, s := recountFixture(t, db)
		d, ok := s.RegistryAuthorizer().(registry.ManifestDeleter)
		if !ok {
			t.Fatal("the registry authorizer decides no manifest deletes")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		refusal, err := d.DeleteManifest(ctx, "operator", "lone/app", "sha256:gone", "", noChildren, func() bool {
			// Another write of the platform while the registry deletes.
			wctx, wcancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer wcancel()
			if err := q.ScheduleRegistryRecount(wctx, "fast", clk.Now()); err != nil {
				t.Errorf("a write while the registry deleted: %v", err)
			}
			cancel() // the client goes away before the answer
			return true
		})
		if refusal != "" || err != nil {
			t.Fatalf("delete: refusal %q, err %v", refusal, err)
		}
		rows, _, err := q.ListAudit(context.Background(), storage.AuditFilter{Action: "artifact.registry_manifest.delete", ResourceID: "lone/app@sha256:gone"}, storage.Page{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Outcome != "success" {
			t.Fatalf("audit rows of a delete whose client went away: %+v; want one success", rows)
		}

		// A refusal the gate decided (a frozen tag) is audited as denied.
		why := "manifest sha256:sig is tagged sha256-x.sig, which holds the signature of a verified artifact: it can no longer be deleted"
		refusal, err = d.DeleteManifest(context.Background(), "operator", "lone/app", "sha256:sig", why, noChildren, func() bool {
			t.Error("the registry was asked to delete a manifest the gate refused")
			return true
		})
		if refusal != why || err != nil {
			t.Fatalf("delete of a frozen manifest: refusal %q, err %v", refusal, err)
		}
		rows, _, err = q.ListAudit(context.Background(), storage.AuditFilter{Action: "artifact.registry_manifest.delete", ResourceID: "lone/app@sha256:sig", Outcome: "denied"}, storage.Page{Limit: 10})
		if err != nil || len(rows) != 1 {
			t.Fatalf("denied rows of a frozen manifest's delete: %d %v; want 1", len(rows), err)
		}
	})
}

// noChildren is the registry of a repository holding no image index.
func noChildren(context.Context, string) ([]string, error) { return nil, nil }

// A recount that started before a delete may have read the manifest still
// there; whenever it ends, the project stays due for a recount that sees
// the delete. The request made only before the delete was cleared by such
// a recount (it clears what was due by its start), and the quota stayed
// counted until the project's next delete.
func TestRegistryManifestDeleteOutlivesARecountThatStartedBefore(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		clk, q, s := recountFixture(t, db)
		org := iam.Org{ID: uuid.NewString(), Slug: "del-" + uuid.NewString()[:8], Name: "del", CreatedAt: clk.Now()}
		if err := q.CreateOrg(ctx, org); err != nil {
			t.Fatal(err)
		}
		p := iam.Project{ID: uuid.NewString(), OrgID: org.ID, Slug: "del", Name: "del", CreatedAt: clk.Now()}
		if err := q.CreateProject(ctx, p); err != nil {
			t.Fatal(err)
		}
		repo := "gpuaas/apps/" + org.Slug + "/del/app"
		if err := q.InsertArtifactIntent(ctx, artifacts.ArtifactIntent{ID: uuid.NewString(), Kind: "publish", OrgID: org.ID, ProjectID: p.ID,
			ArtifactKind: "oci", SourceType: "oci_registry", AppSlug: "app", AppVersion: "1.0.0", ArtifactName: "runtime", Repository: repo,
			CreatedBy: "user:u-1", CreatedAt: clk.Now(), ExpiresAt: clk.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		d := s.RegistryAuthorizer().(registry.ManifestDeleter)
		for _, clearedAt := range []string{"during the delete", "after it"} {
			var recountStart time.Time
			_, err := d.DeleteManifest(ctx, "operator", repo, "sha256:"+clearedAt[:5], "", noChildren, func() bool {
				// A recount starts (and reads storage) before the
				// registry deletes ...
				recountStart = clk.Now()
				clk.Advance(time.Second)
				if clearedAt == "during the delete" {
					if err := q.ClearRegistryRecount(ctx, p.ID, recountStart); err != nil {
						t.Fatal(err)
					}
				}
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			// ... and clears what was due by its start, now or later.
			if err := q.ClearRegistryRecount(ctx, p.ID, recountStart); err != nil {
				t.Fatal(err)
			}
			if due := dueRecounts(t, q, clk.Now()); !slices.Contains(due, p.ID) {
				t.Fatalf("a recount that started before the delete cleared %s: due %v; want the project %s still due", clearedAt, due, p.ID)
			}
			if err := q.ClearRegistryRecount(ctx, p.ID, clk.Now()); err != nil {
				t.Fatal(err)
			}
		}
	})
}
