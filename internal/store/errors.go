package store

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Sentinels returned by every query: storage's, so domains test them
// without importing this package.
var (
	ErrNotFound      = storage.ErrNotFound
	ErrAlreadyExists = storage.ErrAlreadyExists
	ErrConflict      = storage.ErrConflict
	ErrUnavailable   = storage.ErrUnavailable
	ErrDeadlock      = storage.ErrDeadlock
)

// mapErr converts driver errors into store sentinels, keeping the original
// as the wrapped cause for logs.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if unreachable(err) {
		return wrap(ErrUnavailable, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505": // unique_violation
			return wrap(ErrAlreadyExists, err)
		case "40P01": // deadlock_detected
			return wrap(ErrDeadlock, err)
		case "23503", "23514", "40001": // foreign key, check, serialization failure
			return wrap(ErrConflict, err)
		case "22021", "22P05": // invalid byte sequence, untranslatable character (NUL)
			// The HTTP edge refuses such text; this keeps any path that
			// slips past it a 400, not a 500.
			return errdefs.Invalid("invalid_encoding", "text must be valid UTF-8 without NUL characters")
		}
		return err
	}
	var sqErr *sqlite.Error
	if errors.As(err, &sqErr) {
		switch sqErr.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return wrap(ErrAlreadyExists, err)
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY, sqlite3.SQLITE_CONSTRAINT_CHECK:
			return wrap(ErrConflict, err)
		}
	}
	return err
}

// unreachable reports connection-class failures: the database refused or
// dropped the connection, is shutting down or starting, or is out of
// connections. Nothing about the request is wrong; it may be retried.
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || // connection_exception
			pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" || // admin/crash shutdown, cannot connect now
			pgErr.Code == "53300" // too_many_connections
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	var sqErr *sqlite.Error
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &sqErr):
		c := sqErr.Code() & 0xff // primary code: SQLITE_BUSY_* are busy too
		return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
	}
	// pgx reports a connection it closed after a failure by text only.
	return pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}

type sentinelErr struct {
	sentinel error
	cause    error
}

func (e sentinelErr) Error() string   { return e.sentinel.Error() + ": " + e.cause.Error() }
func (e sentinelErr) Is(t error) bool { return t == e.sentinel }
func (e sentinelErr) Unwrap() error   { return e.cause }

func wrap(sentinel, cause error) error { return sentinelErr{sentinel: sentinel, cause: cause} }
