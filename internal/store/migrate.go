package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrationFS embed.FS

// Migration is one numbered schema step for one dialect.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists the embedded migrations of a dialect in order.
func Migrations(d Dialect) ([]Migration, error) {
	dir := "migrations/" + string(d)
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".up.sql") {
			continue
		}
		num, rest, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.up.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		body, err := fs.ReadFile(migrationFS, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(rest, ".up.sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("%s migrations are not contiguous: expected %d, found %d", d, i+1, m.Version)
		}
	}
	return out, nil
}

// LatestVersion is the schema version this binary knows.
func LatestVersion(d Dialect) int {
	ms, err := Migrations(d)
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// ErrSchemaTooNew means the database was migrated by a newer gpuaas.
type ErrSchemaTooNew struct{ Database, Binary int }

func (e ErrSchemaTooNew) Error() string {
	return fmt.Sprintf("database schema version %d is newer than this binary supports (%d); run a newer gpuaas", e.Database, e.Binary)
}

// SchemaGap reports the two versions (for /readyz, which shows them and no
// other error text).
func (e ErrSchemaTooNew) SchemaGap() (database, binary int) { return e.Database, e.Binary }

// ErrSchemaBehind means the database still needs this binary's migrations.
type ErrSchemaBehind struct{ Database, Binary int }

func (e ErrSchemaBehind) Error() string {
	return fmt.Sprintf("database schema version %d is behind this binary (%d); run gpuaas migrate", e.Database, e.Binary)
}

// SchemaGap: see ErrSchemaTooNew.SchemaGap.
func (e ErrSchemaBehind) SchemaGap() (database, binary int) { return e.Database, e.Binary }

const createMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TEXT NOT NULL
)`

// migrateLock is the PostgreSQL advisory lock every schema change holds:
// replicas migrating one database take turns.
const migrateLock = 7434211

// SchemaVersion reports the version recorded in the database (0 when fresh).
// It only reads: the server may run as a role that cannot create tables
// (gpuaas_app, with --auto-migrate=false), which `CREATE TABLE IF NOT
// EXISTS` refuses even when the table exists.
func (db *DB) SchemaVersion(ctx context.Context) (int, error) {
	exists, err := db.migrationsTableExists(ctx)
	if err != nil || !exists {
		return 0, err
	}
	var v int
	err = db.sql.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, mapErr(err)
}

func (db *DB) migrationsTableExists(ctx context.Context) (bool, error) {
	query := `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`
	if db.dialect == Postgres {
		// The schema tables are created in (CREATE TABLE IF NOT EXISTS
		// looked only in) the current schema, not anywhere on the path.
		query = `SELECT COUNT(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema() AND tablename = 'schema_migrations'`
	}
	var n int
	if err := db.sql.QueryRowContext(ctx, query).Scan(&n); err != nil {
		return false, fmt.Errorf("find schema_migrations: %w", mapErr(err))
	}
	return n > 0, nil
}

// ensureMigrationsTable creates schema_migrations if it is missing, under
// the migration lock: concurrent CREATE TABLE IF NOT EXISTS of one table
// fail on PostgreSQL (a unique violation in its catalog), which stopped
// replicas starting together on a fresh database.
func (db *DB) ensureMigrationsTable(ctx context.Context) error {
	if exists, err := db.migrationsTableExists(ctx); err != nil || exists {
		return err
	}
	err := db.InTx(ctx, func(q *Queries) error {
		if db.dialect == Postgres {
			if _, err := q.exec(ctx, `SELECT pg_advisory_xact_lock(`+strconv.Itoa(migrateLock)+`)`); err != nil {
				return err
			}
		}
		_, err := q.exec(ctx, createMigrationsTable)
		return err
	})
	if err != nil {
		return fmt.Errorf("ensure schema_migrations: %w", err)
	}
	return nil
}

// Migrate applies every pending migration, each in its own transaction. On
// PostgreSQL an advisory lock keeps concurrent replicas from racing. It
// refuses a database whose schema is newer than the binary.
func (db *DB) Migrate(ctx context.Context) (applied int, err error) {
	ms, err := Migrations(db.dialect)
	if err != nil {
		return 0, err
	}
	if err := db.ensureMigrationsTable(ctx); err != nil {
		return 0, err
	}
	for _, m := range ms {
		done := false
		err := db.InTx(ctx, func(q *Queries) error {
			if db.dialect == Postgres {
				// Held until the transaction ends; replicas wait here in turn.
				if _, err := q.exec(ctx, `SELECT pg_advisory_xact_lock(`+strconv.Itoa(migrateLock)+`)`); err != nil {
					return err
				}
			}
			var cur int
			if err := q.queryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&cur); err != nil {
				return err
			}
			if cur > len(ms) {
				return ErrSchemaTooNew{Database: cur, Binary: len(ms)}
			}
			if cur >= m.Version {
				return nil
			}
			if _, err := q.exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := q.exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, ts(db.now())); err != nil {
				return err
			}
			done = true
			return nil
		})
		if err != nil {
			return applied, err
		}
		if done {
			applied++
			db.logger.InfoContext(ctx, "applied migration", "version", m.Version, "name", m.Name, "dialect", db.dialect)
		}
	}
	return applied, nil
}

// CheckSchema returns nil when the database is exactly at the binary's
// version, ErrSchemaTooNew when ahead, and an error naming the gap when behind.
func (db *DB) CheckSchema(ctx context.Context) error {
	cur, err := db.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	latest := LatestVersion(db.dialect)
	switch {
	case cur > latest:
		return ErrSchemaTooNew{Database: cur, Binary: latest}
	case cur < latest:
		return ErrSchemaBehind{Database: cur, Binary: latest}
	}
	return nil
}
