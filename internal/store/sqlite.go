package store

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // registers the pure-Go "sqlite" driver
)

// SQLite settings live here, in one typed place.
//
//   - WAL lets readers run beside the one writer.
//   - busy_timeout makes a second writer wait instead of failing at once.
//   - _txlock=immediate takes the write lock at BEGIN, so two read-then-write
//     transactions cannot deadlock upgrading their locks (SQLITE_BUSY mid-tx).
//   - foreign_keys is off by default in SQLite; the schema relies on it.
//   - The pool is small: SQLite serialises writers anyway, and every extra
//     connection is only another waiter on the same lock.
const (
	sqliteBusyTimeoutMS = 10_000
	sqliteMaxOpenConns  = 4
)

// privateFile creates the database file owner-only (0600) before SQLite
// opens it (SQLite would create it 0644 under the usual umask), and narrows
// an existing one. SQLite gives its -wal and -shm files the database file's
// mode.
func privateFile(path string) error {
	if path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sqlite file: %w", err)
	}
	_ = f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sqlite file mode: %w", err)
		}
	}
	return nil
}

func openSQLite(path string) (*sql.DB, error) {
	if path == "" {
		return nil, fmt.Errorf("sqlite path is empty")
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	if err := privateFile(path); err != nil {
		return nil, err
	}
	v := url.Values{}
	v.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqliteBusyTimeoutMS))
	v.Add("_pragma", "journal_mode(WAL)")
	v.Add("_pragma", "foreign_keys(1)")
	v.Add("_pragma", "synchronous(NORMAL)")
	v.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+v.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(sqliteMaxOpenConns)
	db.SetMaxIdleConns(sqliteMaxOpenConns)
	return db, nil
}
