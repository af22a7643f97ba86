package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/iam"
)

// iam.SigningKey is the IAM domain's.

var _ iam.KeyResealer = (*Queries)(nil)

const signingKeyCols = `kid, purpose, algorithm, private_key, public_key, created_at, retired_at`

func (q *Queries) InsertSigningKey(ctx context.Context, k iam.SigningKey) error {
	_, err := q.exec(ctx, `INSERT INTO signing_keys (`+signingKeyCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		k.KID, k.Purpose, k.Algorithm, k.PrivateKey, k.PublicKey, ts(k.CreatedAt), nullTS(k.RetiredAt))
	return err
}

// SigningKeys lists the keys of a purpose, oldest first, retired ones included
// (their public halves still verify tokens issued before retirement).
func (q *Queries) SigningKeys(ctx context.Context, purpose string) ([]iam.SigningKey, error) {
	rows, err := q.query(ctx, `SELECT `+signingKeyCols+` FROM signing_keys WHERE purpose = ? ORDER BY created_at, kid`, purpose)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (iam.SigningKey, error) {
		var k iam.SigningKey
		err := s.Scan(&k.KID, &k.Purpose, &k.Algorithm, &k.PrivateKey, &k.PublicKey, scanTime(&k.CreatedAt), scanTime(&k.RetiredAt))
		return k, err
	})
}

// ResealSigningKey replaces the sealed private half of the key kid of
// purpose with to while the row still holds from, and writes audit with it
// (its id and correlation id filled when empty); a row that no longer holds
// from (another replica resealed it first) is left alone, without an audit
// row. On the pool it runs in a transaction of its own (keyTx).
func (q *Queries) ResealSigningKey(ctx context.Context, kid, purpose, from, to string, audit AuditEvent) error {
	return q.keyTx(ctx, func(q *Queries) error { return q.resealSigningKey(ctx, kid, purpose, from, to, audit) })
}

// signingKeyLockClass is the first key of the PostgreSQL advisory lock
// InsertFirstSigningKey takes (the second is the purpose's hash), apart
// from placements' (placementLockClass) and the one-key locks.
const signingKeyLockClass = 0x67706b79 // "gpky"

// InsertFirstSigningKey stores k unless its purpose already has an
// unretired key, and reports whether it did. Replicas starting together on
// an empty table each generate a key and try: the check and the insert run
// in one transaction under a lock per purpose (PostgreSQL: an advisory
// lock; SQLite is one process), so one key is stored and every replica
// loads that one. Each storing its own and picking the oldest did not
// converge: a replica that read before the other's commit kept its own
// key, and a registry set up with it refused the other's tokens. On the
// pool it runs in a transaction of its own (keyTx).
func (q *Queries) InsertFirstSigningKey(ctx context.Context, k iam.SigningKey) (inserted bool, err error) {
	err = q.keyTx(ctx, func(q *Queries) error {
		if q.d == Postgres {
			if _, err := q.exec(ctx, `SELECT pg_advisory_xact_lock(`+strconv.Itoa(signingKeyLockClass)+`, hashtext(?))`, k.Purpose); err != nil {
				return err
			}
		}
		rows, err := q.SigningKeys(ctx, k.Purpose)
		if err != nil || slices.ContainsFunc(rows, func(r iam.SigningKey) bool { return r.RetiredAt.IsZero() }) {
			return err
		}
		inserted = true
		return q.InsertSigningKey(ctx, k)
	})
	return inserted && err == nil, err
}

// keyTx runs fn in a transaction: a new one when q is the pool's (the key
// loaders run at start, with no Store to Mutate with), or the one q is in.
func (q *Queries) keyTx(ctx context.Context, fn func(q *Queries) error) error {
	if q.pool == nil {
		return fn(q)
	}
	return q.pool.InTx(ctx, fn)
}

func (q *Queries) resealSigningKey(ctx context.Context, kid, purpose, from, to string, audit AuditEvent) error {
	res, err := q.exec(ctx, `UPDATE signing_keys SET private_key = ? WHERE kid = ? AND purpose = ? AND private_key = ?`, to, kid, purpose, from)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	if audit.ID == "" {
		audit.ID = uuid.Must(uuid.NewV7()).String()
	}
	if audit.CorrelationID == "" {
		audit.CorrelationID = correlation.ID(ctx)
	}
	if err := q.InsertAudit(ctx, audit); err != nil {
		return fmt.Errorf("write audit row: %w", err)
	}
	return nil
}
