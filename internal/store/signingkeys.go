package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/errdefs"
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
		if err := q.lockPurpose(ctx, k.Purpose); err != nil {
			return err
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
	return q.insertKeyAudit(ctx, audit)
}

// lockPurpose serializes, on PostgreSQL, the changes to one purpose's keys
// (first key, rotate, retire) for the rest of q's transaction; SQLite is
// one writer already.
func (q *Queries) lockPurpose(ctx context.Context, purpose string) error {
	if q.d != Postgres {
		return nil
	}
	_, err := q.exec(ctx, `SELECT pg_advisory_xact_lock(`+strconv.Itoa(signingKeyLockClass)+`, hashtext(?))`, purpose)
	return err
}

// AddSigningKey stores k as the newest key of its purpose, the one that
// signs, with audit, in one transaction of its own. Keys sign newest
// first by created_at: a k stamped no later than the newest key (a clock
// behind another host's) is stamped a microsecond after it, so the key
// just added is the signer whatever the clocks say. It returns k as
// stored.
func (q *Queries) AddSigningKey(ctx context.Context, k iam.SigningKey, audit AuditEvent) (iam.SigningKey, error) {
	err := q.keyTx(ctx, func(q *Queries) error {
		if err := q.lockPurpose(ctx, k.Purpose); err != nil {
			return err
		}
		rows, err := q.SigningKeys(ctx, k.Purpose)
		if err != nil {
			return err
		}
		// Compared as stored (whole microseconds): a key made in the
		// newest one's microsecond would otherwise tie with it once stored.
		k.CreatedAt = k.CreatedAt.Truncate(time.Microsecond)
		if n := len(rows); n > 0 && !k.CreatedAt.After(rows[n-1].CreatedAt.Truncate(time.Microsecond)) {
			k.CreatedAt = rows[n-1].CreatedAt.Truncate(time.Microsecond).Add(time.Microsecond)
		}
		if err := q.InsertSigningKey(ctx, k); err != nil {
			return err
		}
		return q.insertKeyAudit(ctx, audit)
	})
	return k, err
}

// RetireSigningKey marks the key kid retired at at, with audit, in one
// transaction of its own, and returns it. It refuses a kid no key has
// (NotFound), a key already retired (Conflict), and the last unretired key
// of its purpose (FailedPrecondition: nothing would sign).
func (q *Queries) RetireSigningKey(ctx context.Context, kid string, at time.Time, audit AuditEvent) (iam.SigningKey, error) {
	var out iam.SigningKey
	err := q.keyTx(ctx, func(q *Queries) error {
		var purpose string
		if err := q.queryRow(ctx, `SELECT purpose FROM signing_keys WHERE kid = ?`, kid).Scan(&purpose); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return errdefs.NotFound("signing_key_not_found", "no signing key has the kid %s: gpuaas keys list shows them", kid)
			}
			return err
		}
		if err := q.lockPurpose(ctx, purpose); err != nil {
			return err
		}
		rows, err := q.SigningKeys(ctx, purpose)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(rows, func(r iam.SigningKey) bool { return r.KID == kid })
		if i < 0 {
			return errdefs.NotFound("signing_key_not_found", "no signing key has the kid %s: gpuaas keys list shows them", kid)
		}
		if !rows[i].RetiredAt.IsZero() {
			return errdefs.Conflict("signing_key_retired", "the %s key %s was already retired at %s", purpose, kid, rows[i].RetiredAt.UTC().Format(time.RFC3339))
		}
		live := 0
		for _, r := range rows {
			if r.RetiredAt.IsZero() {
				live++
			}
		}
		if live == 1 {
			return errdefs.FailedPrecondition("last_signing_key", "%s is the only unretired %s key, and something must sign: run gpuaas keys rotate --purpose %s first, then retire it", kid, purpose, purpose)
		}
		if _, err := q.exec(ctx, `UPDATE signing_keys SET retired_at = ? WHERE kid = ? AND retired_at IS NULL`, ts(at), kid); err != nil {
			return err
		}
		out = rows[i]
		out.RetiredAt = at
		return q.insertKeyAudit(ctx, audit)
	})
	return out, err
}

// insertKeyAudit writes audit, its id and correlation id filled when empty.
func (q *Queries) insertKeyAudit(ctx context.Context, audit AuditEvent) error {
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
