package store

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/registry"
)

// SignatureTagLockStateForTest counts the sessions of db's server that
// hold, and that wait for, the advisory lock of a signature tag key.
func SignatureTagLockStateForTest(ctx context.Context, db *DB, key string) (held, waiting int, err error) {
	k := uint64(signatureTagLockKey(registry.Key{Name: key}))
	err = db.sql.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted) FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1`, int64(k>>32), int64(k&0xffffffff)).Scan(&held, &waiting)
	return held, waiting, err
}

// SignatureTagLocksWithSlotsForTest is SignatureTagLocks(db) bounded to
// slots connections.
func SignatureTagLocksWithSlotsForTest(db *DB, slots int) *advisoryLocks {
	return &advisoryLocks{db: db, slots: make(chan struct{}, slots)}
}

// SignatureTagLockModesForTest lists the modes ("ExclusiveLock",
// "ShareLock") in which sessions of db's server hold the advisory lock of
// a signature tag key, sorted.
func SignatureTagLockModesForTest(ctx context.Context, db *DB, key string) ([]string, error) {
	k := uint64(signatureTagLockKey(registry.Key{Name: key}))
	rows, err := db.sql.QueryContext(ctx, `SELECT mode FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1 AND granted ORDER BY mode`, int64(k>>32), int64(k&0xffffffff))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var modes []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			return nil, err
		}
		modes = append(modes, m)
	}
	return modes, rows.Err()
}
