// Package storetest opens real databases for tests: a fresh SQLite file, or
// a fresh schema in the PostgreSQL named by GPUAAS_TEST_DATABASE_URL.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuaas/gpuaas/internal/store"
)

// EnvPostgresURL names the PostgreSQL server tests use.
const EnvPostgresURL = "GPUAAS_TEST_DATABASE_URL"

// Dialects lists the dialects every conformance test runs against.
var Dialects = []store.Dialect{store.SQLite, store.Postgres}

// Open returns a migrated, empty database of dialect d, closed at cleanup.
// PostgreSQL tests skip loudly when no server is configured — and fail
// instead when CI=true, where skipping would hide a broken setup.
func Open(t testing.TB, d store.Dialect) *store.DB {
	t.Helper()
	return openMigrated(t, string(d), URL(t, d))
}

// openMigrated opens the database at url (named what in failures), closed
// at cleanup, and migrates it.
func openMigrated(t testing.TB, what, url string) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), url, nil)
	if err != nil {
		t.Fatalf("open %s: %v", what, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate %s: %v", what, err)
	}
	return db
}

// URL returns a database URL of dialect d private to this test: a new SQLite
// file, or a new PostgreSQL schema dropped at cleanup.
func URL(t testing.TB, d store.Dialect) string {
	t.Helper()
	if d == store.SQLite {
		return "sqlite://" + filepath.Join(t.TempDir(), "gpuaas.db")
	}
	base := PostgresURL(t)
	schema := "t_" + randHex(8)
	onServer(t, base, `CREATE SCHEMA `+schema, `DROP SCHEMA `+schema+` CASCADE`)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("postgres url: %v", err)
	}
	qv := u.Query()
	qv.Set("search_path", schema)
	// Sessions carry the schema's name, so a test can tell its own in
	// pg_stat_activity from those of tests running beside it.
	qv.Set("application_name", schema)
	u.RawQuery = qv.Encode()
	return u.String()
}

// OpenOwnDatabase returns a migrated PostgreSQL database of its own on the
// configured server, dropped at cleanup: for a test that reads the
// server's per-database statistics (pg_stat_database), which the schemas
// of tests running beside it would move too.
func OpenOwnDatabase(t testing.TB) *store.DB {
	t.Helper()
	base := PostgresURL(t)
	name := "t_" + randHex(8)
	onServer(t, base, `CREATE DATABASE `+name, `DROP DATABASE `+name+` WITH (FORCE)`)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("postgres url: %v", err)
	}
	u.Path = "/" + name
	return openMigrated(t, name, u.String())
}

// onServer runs create on the PostgreSQL server at base now, and drop at
// cleanup (after the cleanups registered later, such as closing the
// database create made).
func onServer(t testing.TB, base, create, drop string) {
	t.Helper()
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer admin.Close()
	if _, err := admin.Exec(create); err != nil {
		t.Fatalf("postgres: %s: %v", create, err)
	}
	t.Cleanup(func() {
		a, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer a.Close()
		_, _ = a.Exec(drop)
	})
}

// PostgresURL returns the configured server URL or skips (fails under CI).
func PostgresURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvPostgresURL)
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set but CI=true: PostgreSQL tests must not skip in CI", EnvPostgresURL)
		}
		t.Skipf("!!! SKIPPING POSTGRESQL TEST: set %s (e.g. postgres://postgres@localhost:5432/gpuaas_test?sslmode=disable) to run it !!!", EnvPostgresURL)
	}
	return u
}

// EachDialect runs fn as a subtest (a sub-benchmark for a *testing.B) per
// dialect: the one loop every test of both databases goes through.
func EachDialect[T interface{ Run(string, func(T)) bool }](t T, fn func(t T, d store.Dialect)) {
	for _, d := range Dialects {
		t.Run(string(d), func(t T) { fn(t, d) })
	}
}

// ForEachDialect runs fn per dialect with a fresh, migrated database.
func ForEachDialect(t *testing.T, fn func(t *testing.T, db *store.DB)) {
	EachDialect(t, func(t *testing.T, d store.Dialect) { fn(t, Open(t, d)) })
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
