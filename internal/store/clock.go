package store

import (
	"context"
	"time"
)

// ClockOffset is how far the clock now runs ahead of the database
// server's (negative: behind it), to within half a round trip. Replicas
// judge times other replicas stamped (a node's last heartbeat, a used
// assertion id's expiry), so their clocks must agree; the database's is
// the clock they all see. On SQLite, a file of this machine, it is 0.
func (db *DB) ClockOffset(ctx context.Context, now func() time.Time) (time.Duration, error) {
	if db.dialect != Postgres {
		return 0, nil
	}
	var server time.Time
	before := now()
	if err := db.sql.QueryRowContext(ctx, `SELECT clock_timestamp()`).Scan(&server); err != nil {
		return 0, mapErr(err)
	}
	after := now()
	return before.Add(after.Sub(before) / 2).Sub(server), nil
}
