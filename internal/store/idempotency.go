package store

import (
	"context"
	"time"
)

// IdempotencyRecord remembers the outcome of one keyed request so a retry
// gets the same answer instead of a second side effect.
type IdempotencyRecord struct {
	Principal   string
	Key         string
	Method      string
	Path        string
	RequestHash string
	State       string // in_flight | complete
	StatusCode  int
	Body        []byte
	ContentType string
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

const idemCols = `principal, idem_key, method, path, request_hash, state, status_code, response_body, content_type, created_at, expires_at`

// AbandonedAfter is how long an in-flight claim may stand before it is taken
// as abandoned — the replica serving it died mid-request — and a retry may
// claim the key again instead of getting 409 until the key expires.
const AbandonedAfter = 5 * time.Minute

// ClaimIdempotencyKey inserts an in-flight record. ErrAlreadyExists means the
// key is taken: read it with GetIdempotencyRecord. An expired record, or an
// in-flight one older than AbandonedAfter, is replaced.
func (q *Queries) ClaimIdempotencyKey(ctx context.Context, r IdempotencyRecord) error {
	if _, err := q.exec(ctx, `DELETE FROM idempotency_keys WHERE principal = ? AND idem_key = ?
		AND (expires_at <= ? OR (state = 'in_flight' AND created_at <= ?))`,
		r.Principal, r.Key, ts(r.CreatedAt), ts(r.CreatedAt.Add(-AbandonedAfter))); err != nil {
		return err
	}
	_, err := q.exec(ctx, `INSERT INTO idempotency_keys (`+idemCols+`) VALUES (?, ?, ?, ?, ?, 'in_flight', 0, NULL, '', ?, ?)`,
		r.Principal, r.Key, r.Method, r.Path, r.RequestHash, ts(r.CreatedAt), ts(r.ExpiresAt))
	return err
}

func (q *Queries) GetIdempotencyRecord(ctx context.Context, principal, key string) (IdempotencyRecord, error) {
	var r IdempotencyRecord
	err := q.queryRow(ctx, `SELECT `+idemCols+` FROM idempotency_keys WHERE principal = ? AND idem_key = ?`, principal, key).Scan(
		&r.Principal, &r.Key, &r.Method, &r.Path, &r.RequestHash, &r.State, &r.StatusCode, &r.Body, &r.ContentType,
		scanTime(&r.CreatedAt), scanTime(&r.ExpiresAt))
	return r, scanOne(err)
}

// CompleteIdempotencyKey stores the response of a finished request.
func (q *Queries) CompleteIdempotencyKey(ctx context.Context, principal, key string, status int, body []byte, contentType string) error {
	return q.execOne(ctx, `UPDATE idempotency_keys SET state = 'complete', status_code = ?, response_body = ?, content_type = ? WHERE principal = ? AND idem_key = ?`,
		status, body, contentType, principal, key)
}

// ReleaseIdempotencyKey forgets a key whose request failed in a way worth
// retrying (a server error), so the retry runs for real.
func (q *Queries) ReleaseIdempotencyKey(ctx context.Context, principal, key string) error {
	_, err := q.exec(ctx, `DELETE FROM idempotency_keys WHERE principal = ? AND idem_key = ?`, principal, key)
	return err
}

// PurgeExpiredIdempotencyKeys deletes records past their expiry.
func (q *Queries) PurgeExpiredIdempotencyKeys(ctx context.Context, now time.Time) (int64, error) {
	res, err := q.exec(ctx, `DELETE FROM idempotency_keys WHERE expires_at <= ?`, ts(now))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
