package artifacts_test

import (
	"context"
	"testing"
	"time"

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
