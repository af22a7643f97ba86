package store

import "context"

// ExecForTest runs a raw statement, as a hand-typed query at a SQL prompt
// would: the append-only tests use it to try what no code path does.
func ExecForTest(ctx context.Context, db *DB, query string, args ...any) error {
	_, err := db.Queries().exec(ctx, query, args...)
	return err
}

// QueryRowForTest reads one row of a raw query into dest.
func QueryRowForTest(ctx context.Context, db *DB, query string, dest ...any) error {
	return db.Queries().queryRow(ctx, query).Scan(dest...)
}
