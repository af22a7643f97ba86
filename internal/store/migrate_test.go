package store_test

import (
	"context"
	"net/url"
	"sync"
	"testing"

	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// Replicas started together on a fresh database all migrate it: the
// creation of schema_migrations takes the migration lock too (two
// concurrent CREATE TABLE IF NOT EXISTS of one table fail on PostgreSQL
// with a unique violation in its catalog, and a replica failed to start).
func TestMigrateConcurrentReplicasOnFreshDatabase(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		ctx := context.Background()
		for round := 0; round < 5; round++ {
			u := storetest.URL(t, d)
			dbs := make([]*store.DB, 6)
			for i := range dbs {
				db, err := store.Open(ctx, u, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				dbs[i] = db
			}
			errs := make([]error, len(dbs))
			var wg sync.WaitGroup
			for i, db := range dbs {
				wg.Add(1)
				go func() { defer wg.Done(); _, errs[i] = db.Migrate(ctx) }()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("round %d, replica %d: %v", round, i, err)
				}
			}
			if err := dbs[0].CheckSchema(ctx); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	})
}

// The server runs as gpuaas_app with --auto-migrate=false
// (docs/operations.md): a role with no CREATE on the schema. Its schema
// check must only read; CREATE TABLE IF NOT EXISTS is refused to such a
// role even when the table exists, and the server did not start.
func TestAppRoleChecksSchema(t *testing.T) {
	ctx := context.Background()
	u := storetest.URL(t, store.Postgres)
	owner, err := store.Open(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if _, err := owner.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	qv := pu.Query()
	qv.Set("role", "gpuaas_app") // every session of the pool runs as the role
	pu.RawQuery = qv.Encode()
	app, err := store.Open(ctx, pu.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	var role string
	if err := app.InTx(ctx, func(q *store.Queries) error { return store.CurrentRoleForTest(ctx, q, &role) }); err != nil || role != "gpuaas_app" {
		t.Fatalf("session role = %q, %v; want gpuaas_app", role, err)
	}
	if err := app.CheckSchema(ctx); err != nil {
		t.Fatalf("schema check as gpuaas_app: %v", err)
	}
	if v, err := app.SchemaVersion(ctx); err != nil || v != store.LatestVersion(store.Postgres) {
		t.Fatalf("schema version as gpuaas_app = %d, %v; want %d", v, err, store.LatestVersion(store.Postgres))
	}
	// A fresh database is reported behind, not an error about the table.
	fresh, err := store.Open(ctx, storetest.URL(t, store.Postgres), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if v, err := fresh.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("fresh schema version = %d, %v; want 0", v, err)
	}
}
