// Package store is the persistence layer of gpuaas: one logical schema over
// PostgreSQL (production) and SQLite (the embedded default).
//
// Queries are written once with '?' placeholders and rebound for PostgreSQL.
// Driver errors are turned into errdefs sentinels here, at the lowest layer,
// so no domain ever inspects a driver error.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Dialect names a supported SQL engine (storage's).
type Dialect = storage.Dialect

const (
	Postgres = storage.Postgres
	SQLite   = storage.SQLite
)

// DB is an open database of either dialect.
type DB struct {
	sql     *sql.DB
	dialect Dialect
	logger  *slog.Logger
	// eventHooks run after a mutation that emitted events commits.
	eventHooks atomic.Pointer[[]func()]
	// stmts: prepared statements (SQLite only; nil on PostgreSQL).
	stmts *stmtCache
	// statements counts the statements run through this DB (Statements).
	statements atomic.Int64
	// now stamps what the store fills in itself: audit and event times,
	// idempotency commits, applied migrations (SetClock; the wall clock).
	now func() time.Time
	// maxEventData overrides storage.MaxEventDataBytes for this DB's
	// emits when set (SetMaxEventDataBytes).
	maxEventData atomic.Int64
}

// SetMaxEventDataBytes changes the bound on one event's data for this DB
// (0: storage.MaxEventDataBytes). A test uses it to write the oversized
// outbox row an older binary might have left; the bound of every other DB
// stays as it is.
func (db *DB) SetMaxEventDataBytes(n int) { db.maxEventData.Store(int64(n)) }

func (db *DB) eventDataLimit() int {
	if n := db.maxEventData.Load(); n > 0 {
		return int(n)
	}
	return storage.MaxEventDataBytes
}

// SetClock makes the store stamp its own times (audit rows, outbox
// events, idempotency commits, applied migrations) from now, the server's
// one clock; nil is the wall clock. Call it before the DB is used.
func (db *DB) SetClock(now func() time.Time) { db.now = clock.Or(now) }

// Statements is how many statements this DB has run: what benchmarks count
// when they say what a request or an idle agent costs the database.
func (db *DB) Statements() int64 { return db.statements.Load() }

// Open connects to url: postgres://… / postgresql://… for PostgreSQL,
// sqlite://PATH or a plain file path for SQLite.
func Open(ctx context.Context, url string, logger *slog.Logger) (*DB, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var (
		db  *sql.DB
		d   Dialect
		err error
	)
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		d = Postgres
		db, err = sql.Open("pgx", url)
		if err == nil {
			db.SetMaxOpenConns(20)
			db.SetMaxIdleConns(10)
		}
	default:
		d = SQLite
		db, err = openSQLite(strings.TrimPrefix(url, "sqlite://"))
	}
	if err != nil {
		return nil, fmt.Errorf("open %s database: %w", d, err)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to %s database: %w", d, err)
	}
	out := &DB{sql: db, dialect: d, logger: logger, now: clock.Or(nil)}
	if d == SQLite {
		out.stmts = newStmtCache(db)
	}
	return out, nil
}

// Dialect reports the engine behind db.
func (db *DB) Dialect() Dialect { return db.dialect }

// Close releases the connection pool.
func (db *DB) Close() error {
	db.stmts.close()
	return db.sql.Close()
}

// Ping checks the database answers.
func (db *DB) Ping(ctx context.Context) error { return db.sql.PingContext(ctx) }

// Queries returns the query set bound to the pool (no transaction).
func (db *DB) Queries() *Queries {
	return &Queries{ex: sqlExecer{db.sql}, d: db.dialect, stmts: db.stmts, count: &db.statements, pool: db}
}

// InTx runs fn in one transaction, committing when fn returns nil and rolling
// back otherwise. Every mutation of gpuaas goes through here exactly once.
func (db *DB) InTx(ctx context.Context, fn func(q *Queries) error) (err error) {
	if db.dialect == Postgres {
		return db.inPgxTx(ctx, fn)
	}
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", mapErr(err))
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err = fn(&Queries{ex: sqlExecer{tx}, d: db.dialect, stmts: db.stmts, tx: tx, count: &db.statements}); err != nil {
		return err
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", mapErr(err))
	}
	return nil
}

// execer runs statements: on the pool or a database/sql transaction
// (sqlExecer), or on a PostgreSQL transaction driven through pgx itself
// (pgxTx).
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) row
}

// rows and row are the parts of *sql.Rows and *sql.Row the queries use.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

type row interface{ Scan(dest ...any) error }

// sqlExecer adapts what *sql.DB, *sql.Tx and *sql.Stmt offer to execer.
type sqlExecer struct {
	x interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

func (e sqlExecer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return e.x.ExecContext(ctx, query, args...)
}

func (e sqlExecer) QueryContext(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := e.x.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (e sqlExecer) QueryRowContext(ctx context.Context, query string, args ...any) row {
	return e.x.QueryRowContext(ctx, query, args...)
}

// Queries runs the statements of every domain against a pool or a transaction.
// Methods live in one file per domain.
type Queries struct {
	ex    execer
	d     Dialect
	stmts *stmtCache // SQLite: prepared statements
	tx    *sql.Tx    // set inside a database/sql (SQLite) transaction
	count *atomic.Int64
	// hold is set inside a PostgreSQL transaction: held, inserts waiting
	// to go in one round trip (execHeld); heldErr, the error sending them
	// gave.
	hold    bool
	held    []heldWrite
	heldErr error
	// pool is set on the pool's query set only (DB.Queries): the few
	// queries that need a transaction of their own when called outside
	// one begin it there (keyTx).
	pool *DB
}

func (q *Queries) counted() {
	if q.count != nil {
		q.count.Add(1)
	}
}

// Dialect reports the engine the queries run on.
func (q *Queries) Dialect() Dialect { return q.d }

func (q *Queries) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	q.counted()
	if err := q.sendHeld(ctx); err != nil {
		return nil, err
	}
	if st := q.stmt(ctx, query); st != nil {
		res, err := st.ExecContext(ctx, args...)
		return res, mapErr(err)
	}
	res, err := q.ex.ExecContext(ctx, q.rebind(query), args...)
	return res, mapErr(err)
}

func (q *Queries) query(ctx context.Context, query string, args ...any) (rows, error) {
	q.counted()
	if err := q.sendHeld(ctx); err != nil {
		return nil, err
	}
	if st := q.stmt(ctx, query); st != nil {
		r, err := st.QueryContext(ctx, args...)
		if err != nil {
			return nil, mapErr(err)
		}
		return r, nil
	}
	r, err := q.ex.QueryContext(ctx, q.rebind(query), args...)
	if err != nil {
		return nil, mapErr(err)
	}
	return r, nil
}

func (q *Queries) queryRow(ctx context.Context, query string, args ...any) row {
	q.counted()
	// A failed send dooms the transaction, so this row reports an error
	// too; InTx returns the send's error (heldErr), the one that explains.
	_ = q.sendHeld(ctx)
	if st := q.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return q.ex.QueryRowContext(ctx, q.rebind(query), args...)
}

// execOne runs a statement that must affect exactly one row.
func (q *Queries) execOne(ctx context.Context, query string, args ...any) error {
	res, err := q.exec(ctx, query, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// rebind turns '?' placeholders into $n for PostgreSQL. Queries never hold
// a literal '?' inside strings, so a plain scan is enough.
func (q *Queries) rebind(query string) string {
	if q.d != Postgres || !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// scanOne maps sql.ErrNoRows to ErrNotFound.
func scanOne(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return mapErr(err)
}

// forUpdate ends a SELECT that must hold its rows until the transaction
// ends: FOR UPDATE on PostgreSQL; nothing on SQLite, where a mutation holds
// the whole database (BEGIN IMMEDIATE).
func (q *Queries) forUpdate() string {
	if q.d == Postgres {
		return " FOR UPDATE"
	}
	return ""
}

// forShare ends a SELECT whose rows must not change until the transaction
// ends, while other readers may hold them too: FOR SHARE on PostgreSQL
// (a writer's FOR UPDATE or UPDATE waits); nothing on SQLite (BEGIN
// IMMEDIATE already holds the whole database).
func (q *Queries) forShare() string {
	if q.d == Postgres {
		return " FOR SHARE"
	}
	return ""
}
