package store

import "context"

// LockWaitersOnForTest counts this database's sessions waiting on a lock
// while running a statement that names table (PostgreSQL): a transaction
// blocked on another's row lock there. Only this test's own sessions
// count (storetest's application_name), not those of tests running beside
// it on the same server.
func LockWaitersOnForTest(ctx context.Context, db *DB, table string) (int, error) {
	var n int
	err := db.sql.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
		AND application_name = current_setting('application_name')
		AND query LIKE '%' || $1 || '%' AND query NOT LIKE '%pg_stat_activity%'`, table).Scan(&n)
	return n, err
}
