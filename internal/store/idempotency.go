package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// The idempotency record and claim are storage's: the HTTP edge claims a
// key, and Mutate records the commit under it.
type (
	IdempotencyRecord = storage.IdempotencyRecord
	IdempotencyClaim  = storage.IdempotencyClaim
)

// AbandonedAfter: see storage.AbandonedAfter.
const AbandonedAfter = storage.AbandonedAfter

// WithIdempotencyClaim returns ctx carrying c.
func WithIdempotencyClaim(ctx context.Context, c IdempotencyClaim) context.Context {
	return storage.WithIdempotencyClaim(ctx, c)
}

func idempotencyClaimFrom(ctx context.Context) (IdempotencyClaim, bool) {
	return storage.IdempotencyClaimFrom(ctx)
}

const idemCols = `principal, idem_key, method, path, request_hash, state, status_code, response_body, content_type, created_at, expires_at,
	claim_id, committed_at, resource_type, resource_id, grants_hash, response_headers`

// ClaimIdempotencyKey inserts an in-flight record. ErrAlreadyExists means the
// key is taken: read it with GetIdempotencyRecord. An expired record, or an
// in-flight one older than AbandonedAfter whose change never committed, is
// replaced.
func (q *Queries) ClaimIdempotencyKey(ctx context.Context, r IdempotencyRecord) error {
	if _, err := q.exec(ctx, `DELETE FROM idempotency_keys WHERE principal = ? AND idem_key = ?
		AND (expires_at <= ? OR (state = 'in_flight' AND committed_at IS NULL AND created_at <= ?))`,
		r.Principal, r.Key, ts(r.CreatedAt), ts(r.CreatedAt.Add(-AbandonedAfter))); err != nil {
		return err
	}
	_, err := q.exec(ctx, `INSERT INTO idempotency_keys (principal, idem_key, method, path, request_hash, state, status_code, response_body,
		content_type, created_at, expires_at, claim_id, grants_hash) VALUES (?, ?, ?, ?, ?, 'in_flight', 0, NULL, '', ?, ?, ?, ?)`,
		r.Principal, r.Key, r.Method, r.Path, r.RequestHash, ts(r.CreatedAt), ts(r.ExpiresAt), r.ClaimID, r.GrantsHash)
	return err
}

func (q *Queries) GetIdempotencyRecord(ctx context.Context, principal, key string) (IdempotencyRecord, error) {
	var (
		r       IdempotencyRecord
		headers sql.NullString
	)
	err := q.queryRow(ctx, `SELECT `+idemCols+` FROM idempotency_keys WHERE principal = ? AND idem_key = ?`, principal, key).Scan(
		&r.Principal, &r.Key, &r.Method, &r.Path, &r.RequestHash, &r.State, &r.StatusCode, &r.Body, &r.ContentType,
		scanTime(&r.CreatedAt), scanTime(&r.ExpiresAt), &r.ClaimID, scanTime(&r.CommittedAt), &r.ResourceType, &r.ResourceID, &r.GrantsHash,
		&headers)
	if err != nil {
		return r, scanOne(err)
	}
	if headers.Valid {
		if err := json.Unmarshal([]byte(headers.String), &r.Headers); err != nil {
			return r, fmt.Errorf("idempotency record %s: stored response headers: %w", key, err)
		}
	}
	return r, nil
}

// commitIdempotencyClaim records, inside the mutation's transaction, that
// the claim's change committed and what it changed. A claim that was taken
// over (its request was given up as abandoned and a retry claimed the key)
// refuses: the retry's outcome stands, and this change rolls back.
func (q *Queries) commitIdempotencyClaim(ctx context.Context, c IdempotencyClaim, at time.Time, resourceType, resourceID string) error {
	res, err := q.exec(ctx, `UPDATE idempotency_keys SET committed_at = ?, resource_type = ?, resource_id = ?
		WHERE principal = ? AND idem_key = ? AND claim_id = ? AND committed_at IS NULL`,
		ts(at), resourceType, resourceID, c.Principal, c.Key, c.ClaimID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	// Not ours to mark: a second mutation of the same request (already
	// marked), or the claim was taken over.
	var n int
	if err := q.queryRow(ctx, `SELECT COUNT(*) FROM idempotency_keys WHERE principal = ? AND idem_key = ? AND claim_id = ?`,
		c.Principal, c.Key, c.ClaimID).Scan(&n); err != nil {
		return mapErr(err)
	}
	if n == 0 {
		return errdefs.Conflict("idempotency_claim_lost",
			"this request was given up as abandoned and its idempotency key was claimed by a retry; the retry's outcome stands")
	}
	return nil
}

// CompleteIdempotencyKey stores the response of a finished request under
// its claim: its status, body, content type and the headers a replay
// repeats (none: NULL).
func (q *Queries) CompleteIdempotencyKey(ctx context.Context, c IdempotencyClaim, status int, body []byte, contentType string,
	headers map[string]string) error {
	var h any
	if len(headers) > 0 {
		b, err := json.Marshal(headers)
		if err != nil {
			return err
		}
		h = string(b)
	}
	return q.execOne(ctx, `UPDATE idempotency_keys SET state = 'complete', status_code = ?, response_body = ?, content_type = ?,
		response_headers = ? WHERE principal = ? AND idem_key = ? AND claim_id = ?`,
		status, body, contentType, h, c.Principal, c.Key, c.ClaimID)
}

// ReleaseIdempotencyKey forgets a claim whose request failed before its
// change committed (a server error), so the retry runs for real. A claim
// whose change committed is kept: running it again would do it twice.
func (q *Queries) ReleaseIdempotencyKey(ctx context.Context, c IdempotencyClaim) error {
	_, err := q.exec(ctx, `DELETE FROM idempotency_keys WHERE principal = ? AND idem_key = ? AND claim_id = ? AND committed_at IS NULL`,
		c.Principal, c.Key, c.ClaimID)
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
