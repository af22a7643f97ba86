package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgreSQL transactions go through pgx itself, on a connection taken
// from the database/sql pool, because database/sql sends every statement
// in a round trip of its own and pgx can pipeline (pgx.Batch). On 2 cores a
// round trip costs more than most statements, so a transaction here costs
// two fewer: BEGIN travels with its first statement, and the held inserts
// (held.go) with its COMMIT. A transaction that runs no statement sends
// nothing.
//
// Statements, arguments and errors are the ones the database/sql path
// sees (stdlib hands the same arguments to the same pgx connection);
// scanning differs only in that pgx converts values itself, and the store
// scans into plain Go types or its own sql.Scanner types, which both
// support.

func (db *DB) inPgxTx(ctx context.Context, fn func(q *Queries) error) (err error) {
	conn, err := db.sql.Conn(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", mapErr(err))
	}
	defer conn.Close()
	return conn.Raw(func(dc any) (err error) {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("store: PostgreSQL driver connection is %T, not pgx", dc)
		}
		t := &pgxTx{conn: sc.Conn()}
		defer func() {
			if p := recover(); p != nil {
				t.rollback()
				panic(p)
			}
			if err != nil {
				t.rollback()
			}
		}()
		q := &Queries{ex: t, d: db.dialect, stmts: db.stmts, hold: true, count: &db.statements}
		err = fn(q)
		if q.heldErr != nil {
			// A held insert failed when a later statement sent it; that
			// statement then failed only because the transaction had.
			return q.heldErr
		}
		if err != nil {
			return err
		}
		if err = t.commit(ctx, q.heldStatements()); err != nil {
			return fmt.Errorf("commit: %w", mapErr(err))
		}
		return nil
	})
}

// pgxTx is a PostgreSQL transaction on one pgx connection. BEGIN is not
// sent until the first statement, in the same round trip.
type pgxTx struct {
	conn  *pgx.Conn
	begun bool // BEGIN has been sent
	done  bool // ended: committed, or rolled back
}

// start returns a batch that opens the transaction first, if it is not
// open yet.
func (t *pgxTx) start() *pgx.Batch {
	if t.begun {
		return nil
	}
	t.begun = true
	b := &pgx.Batch{}
	b.Queue("begin")
	return b
}

// sendAfterBegin sends query in batch b after its BEGIN, in one round
// trip, and reads BEGIN's result; the statement's is the caller's to read.
func (t *pgxTx) sendAfterBegin(ctx context.Context, b *pgx.Batch, query string, args []any) (pgx.BatchResults, error) {
	b.Queue(query, args...)
	br := t.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

func (t *pgxTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if !t.begun && len(args) == 0 {
		// A statement without arguments may be several (a migration);
		// only the simple protocol runs those, and it cannot be batched.
		if _, err := t.conn.Exec(ctx, "begin"); err != nil {
			return nil, err
		}
		t.begun = true
	}
	b := t.start()
	if b == nil {
		tag, err := t.conn.Exec(ctx, query, args...)
		return pgxResult(tag), err
	}
	br, err := t.sendAfterBegin(ctx, b, query, args)
	if err != nil {
		return nil, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return pgxResult(tag), err
}

func (t *pgxTx) QueryContext(ctx context.Context, query string, args ...any) (rows, error) {
	b := t.start()
	if b == nil {
		r, err := t.conn.Query(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		return &pgxRows{Rows: r}, nil
	}
	br, err := t.sendAfterBegin(ctx, b, query, args)
	if err != nil {
		return nil, err
	}
	r, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &pgxRows{Rows: r, batch: br}, nil
}

func (t *pgxTx) QueryRowContext(ctx context.Context, query string, args ...any) row {
	r, err := t.QueryContext(ctx, query, args...)
	if err != nil {
		return errRow{err}
	}
	return pgxRow{r}
}

// commit sends the held inserts and COMMIT in one round trip (with BEGIN
// too, when they are all the transaction did).
func (t *pgxTx) commit(ctx context.Context, held []heldWrite) error {
	if !t.begun && len(held) == 0 {
		t.done = true
		return nil // nothing was sent: nothing to end
	}
	b := t.start()
	if b == nil {
		b = &pgx.Batch{}
	}
	for _, h := range held {
		b.Queue(h.query, h.args...)
	}
	b.Queue("commit")
	br := t.conn.SendBatch(ctx, b)
	var err error
	for range b.Len() {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		t.done = true
	}
	return err
}

// rollback ends a transaction that failed. The connection goes back to
// the pool only idle: pgx's stdlib discards one left inside a transaction.
func (t *pgxTx) rollback() {
	if !t.begun || t.done {
		return
	}
	t.done = true
	if t.conn.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = t.conn.Exec(ctx, "rollback")
}

type pgxResult pgconn.CommandTag

func (r pgxResult) LastInsertId() (int64, error) {
	return 0, errors.New("store: LastInsertId is not supported by PostgreSQL")
}

func (r pgxResult) RowsAffected() (int64, error) { return pgconn.CommandTag(r).RowsAffected(), nil }

// pgxRows adapts pgx.Rows to rows; rows read from a batch close it too.
type pgxRows struct {
	pgx.Rows
	batch pgx.BatchResults
}

func (r *pgxRows) Scan(dest ...any) error { return r.Rows.Scan(dest...) }

func (r *pgxRows) Close() error {
	r.Rows.Close()
	err := r.Rows.Err()
	if r.batch != nil {
		if berr := r.batch.Close(); err == nil {
			err = berr
		}
		r.batch = nil
	}
	return err
}

// pgxRow reads the first row as *sql.Row does: sql.ErrNoRows when there is
// none.
type pgxRow struct{ r rows }

func (r pgxRow) Scan(dest ...any) error {
	defer r.r.Close()
	if !r.r.Next() {
		if err := r.r.Err(); err != nil {
			return err
		}
		if err := r.r.Close(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := r.r.Scan(dest...); err != nil {
		return err
	}
	return r.r.Close()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
