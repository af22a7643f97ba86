package store

import (
	"context"
	"time"
)

// ForceSchemaVersionForTest records a schema version as if a newer binary had run.
func ForceSchemaVersionForTest(ctx context.Context, q *Queries, v int) error {
	_, err := q.exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', ?)`, v, ts(time.Now()))
	return err
}

// OutboxByCorrelationForTest returns the outbox rows written under one
// correlation id, oldest first.
func OutboxByCorrelationForTest(ctx context.Context, q *Queries, correlationID string) ([]Event, error) {
	rows, err := q.query(ctx, `SELECT id, type, subject, org_id, project_id, actor, correlation_id, data FROM outbox_events WHERE correlation_id = ? ORDER BY id`, correlationID)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (Event, error) {
		var e Event
		err := s.Scan(&e.ID, &e.Type, &e.Subject, &e.OrgID, &e.ProjectID, &e.Actor, &e.CorrelationID, scanJSON(&e.Data))
		return e, err
	})
}

// LockWaitersForTest counts the other sessions of this database waiting
// on a lock (PostgreSQL).
func LockWaitersForTest(ctx context.Context, db *DB) (int, error) {
	var n int
	err := db.sql.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
	return n, err
}

// IdleInTransactionForTest counts this database's sessions left inside a
// transaction with nothing running (PostgreSQL).
func IdleInTransactionForTest(ctx context.Context, db *DB) (int, error) {
	var n int
	err := db.sql.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&n)
	return n, err
}

// SessionsForTest is how many sessions this database has had (PostgreSQL).
func SessionsForTest(ctx context.Context, db *DB) (int64, error) {
	var n int64
	err := db.sql.QueryRowContext(ctx, `SELECT sessions FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}
