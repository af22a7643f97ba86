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
