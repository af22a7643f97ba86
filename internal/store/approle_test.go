package store_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// The role the server should run as (gpuaas_app, made by migration 0014)
// reads and writes rows, may only read and insert money and usage, and
// cannot switch the ledger's append-only triggers off — the table owner
// can, which is why the server must not run as the owner.
func TestAppRoleCannotDisableLedgerTriggers(t *testing.T) {
	ctx := context.Background()
	url := storetest.URL(t, store.Postgres)
	db, err := store.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, c := range []struct {
		table, priv string
		want        bool
	}{
		{"ledger_entries", "SELECT", true}, {"ledger_entries", "INSERT", true},
		{"ledger_entries", "UPDATE", false}, {"ledger_entries", "DELETE", false}, {"ledger_entries", "TRUNCATE", false},
		{"usage_records", "INSERT", true}, {"usage_records", "UPDATE", false}, {"billing_prices", "DELETE", false},
		{"app_instances", "UPDATE", true}, {"idempotency_keys", "DELETE", true},
	} {
		var got bool
		if err := raw.QueryRowContext(ctx, `SELECT has_table_privilege('gpuaas_app', $1, $2)`, c.table, c.priv).Scan(&got); err != nil {
			t.Fatalf("%s %s: %v", c.table, c.priv, err)
		}
		if got != c.want {
			t.Errorf("gpuaas_app %s on %s: %v, want %v", c.priv, c.table, got, c.want)
		}
	}
	// A table a later migration creates gets the same rights.
	var later bool
	if _, err := raw.ExecContext(ctx, `CREATE TABLE later_table (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	if err := raw.QueryRowContext(ctx, `SELECT has_table_privilege('gpuaas_app', 'later_table', 'INSERT')`).Scan(&later); err != nil || !later {
		t.Fatalf("a later table is not writable by gpuaas_app: %v %v", later, err)
	}
	// As the role, the attempt itself is refused by PostgreSQL.
	tx, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SET LOCAL ROLE gpuaas_app`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT count(*) FROM ledger_entries`); err != nil {
		t.Fatalf("gpuaas_app cannot read the ledger: %v", err)
	}
	_, err = tx.ExecContext(ctx, `ALTER TABLE ledger_entries DISABLE TRIGGER ledger_entries_append_only`)
	if err == nil || !strings.Contains(err.Error(), "must be owner") {
		t.Fatalf("gpuaas_app disabled the ledger's trigger: %v", err)
	}
}
