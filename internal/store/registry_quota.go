package store

import (
	"context"
	"errors"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
)

// The embedded registry's per-project accounting (artifacts.UploadQuota):
// committed blobs, the holds of writes in progress, and the lock row that
// counts a project's pushes one at a time.

// RepositoryProject returns the project whose intents lead to repository
// (the newest, should a slug have been reused), or ErrNotFound.
func (q *Queries) RepositoryProject(ctx context.Context, repository string) (string, error) {
	var id string
	err := q.queryRow(ctx, `SELECT project_id FROM artifact_intents WHERE repository = ? ORDER BY created_at DESC, id DESC LIMIT 1`, repository).Scan(&id)
	return id, scanOne(err)
}

// LockRegistryQuota holds the project's quota row until the transaction
// ends, creating it on the project's first push (on PostgreSQL a second
// inserter waits on the first's key until it commits).
func (q *Queries) LockRegistryQuota(ctx context.Context, projectID string) error {
	if _, err := q.exec(ctx, `INSERT INTO registry_quota_locks (project_id) VALUES (?) ON CONFLICT (project_id) DO NOTHING`, projectID); err != nil {
		return mapErr(err)
	}
	var id string
	return scanOne(q.queryRow(ctx, `SELECT project_id FROM registry_quota_locks WHERE project_id = ?`+q.forUpdate(), projectID).Scan(&id))
}

// RegistryUsage returns the bytes of the project's committed blobs and of
// its holds.
func (q *Queries) RegistryUsage(ctx context.Context, projectID string) (committed, held int64, err error) {
	err = q.queryRow(ctx, `SELECT
		(SELECT COALESCE(SUM(size_bytes), 0) FROM registry_blobs WHERE project_id = ?),
		(SELECT COALESCE(SUM(size_bytes), 0) FROM registry_holds WHERE project_id = ?)`, projectID, projectID).Scan(&committed, &held)
	return committed, held, mapErr(err)
}

// RegistryBlobSize returns the size of a blob the project holds.
func (q *Queries) RegistryBlobSize(ctx context.Context, projectID, digest string) (int64, bool, error) {
	var n int64
	err := scanOne(q.queryRow(ctx, `SELECT size_bytes FROM registry_blobs WHERE project_id = ? AND digest = ?`, projectID, digest).Scan(&n))
	if errors.Is(err, ErrNotFound) {
		return 0, false, nil
	}
	return n, err == nil, err
}

// InsertRegistryBlob records a committed blob; of one the project holds
// already only the time it was last used moves (never back).
func (q *Queries) InsertRegistryBlob(ctx context.Context, b artifacts.RegistryBlob) error {
	used := b.UsedAt
	if used.IsZero() {
		used = b.CreatedAt
	}
	_, err := q.exec(ctx, `INSERT INTO registry_blobs (project_id, digest, size_bytes, repository, created_at, used_at) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (project_id, digest) DO UPDATE SET used_at = CASE
			WHEN registry_blobs.used_at IS NULL OR excluded.used_at > registry_blobs.used_at THEN excluded.used_at
			ELSE registry_blobs.used_at END`, b.ProjectID, b.Digest, b.SizeBytes, b.Repository, ts(b.CreatedAt), ts(used))
	return mapErr(err)
}

// TouchRegistryBlob marks a blob the project holds as used at at (never
// moving it back); none held is fine.
func (q *Queries) TouchRegistryBlob(ctx context.Context, projectID, digest string, at time.Time) error {
	_, err := q.exec(ctx, `UPDATE registry_blobs SET used_at = ? WHERE project_id = ? AND digest = ? AND (used_at IS NULL OR used_at < ?)`,
		ts(at), projectID, digest, ts(at))
	return mapErr(err)
}

// RegistryBlobs returns every blob the project holds, by digest. A row
// written before used_at existed was last used when it was created.
func (q *Queries) RegistryBlobs(ctx context.Context, projectID string) ([]artifacts.RegistryBlob, error) {
	rows, err := q.query(ctx, `SELECT project_id, digest, size_bytes, repository, created_at, COALESCE(used_at, created_at)
		FROM registry_blobs WHERE project_id = ? ORDER BY digest`, projectID)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (artifacts.RegistryBlob, error) {
		var b artifacts.RegistryBlob
		err := s.Scan(&b.ProjectID, &b.Digest, &b.SizeBytes, &b.Repository, scanTime(&b.CreatedAt), scanTime(&b.UsedAt))
		return b, err
	})
}

// DeleteRegistryBlob stops counting a blob against the project; none is
// fine.
func (q *Queries) DeleteRegistryBlob(ctx context.Context, projectID, digest string) error {
	_, err := q.exec(ctx, `DELETE FROM registry_blobs WHERE project_id = ? AND digest = ?`, projectID, digest)
	return mapErr(err)
}

// RegistryRepositories returns every repository the project's intents
// lead to or its blobs came in through, sorted.
func (q *Queries) RegistryRepositories(ctx context.Context, projectID string) ([]string, error) {
	rows, err := q.query(ctx, `SELECT repository FROM artifact_intents WHERE project_id = ? AND repository <> ''
		UNION SELECT repository FROM registry_blobs WHERE project_id = ? ORDER BY 1`, projectID, projectID)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (string, error) {
		var r string
		return r, s.Scan(&r)
	})
}

// ScheduleRegistryRecount asks for the project's accounting to be
// recounted from at, or earlier if it is asked for already.
func (q *Queries) ScheduleRegistryRecount(ctx context.Context, projectID string, at time.Time) error {
	_, err := q.exec(ctx, `INSERT INTO registry_recounts (project_id, due_at) VALUES (?, ?)
		ON CONFLICT (project_id) DO UPDATE SET due_at = CASE WHEN excluded.due_at < registry_recounts.due_at
			THEN excluded.due_at ELSE registry_recounts.due_at END`, projectID, ts(at))
	return mapErr(err)
}

// RequestRegistryRecount asks for the project's recount due at, replacing
// whatever due time it had.
func (q *Queries) RequestRegistryRecount(ctx context.Context, projectID string, at time.Time) error {
	_, err := q.exec(ctx, `INSERT INTO registry_recounts (project_id, due_at) VALUES (?, ?)
		ON CONFLICT (project_id) DO UPDATE SET due_at = excluded.due_at`, projectID, ts(at))
	return mapErr(err)
}

// DueRegistryRecounts returns up to limit projects whose recount is due
// at or before at, longest due first.
func (q *Queries) DueRegistryRecounts(ctx context.Context, at time.Time, limit int) ([]string, error) {
	rows, err := q.query(ctx, `SELECT project_id FROM registry_recounts WHERE due_at <= ? ORDER BY due_at, project_id LIMIT ?`, ts(at), limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (string, error) {
		var id string
		return id, s.Scan(&id)
	})
}

// ClearRegistryRecount forgets the project's recount if it was due at or
// before through: one asked for later (a manifest deleted while the
// recount ran) stays.
func (q *Queries) ClearRegistryRecount(ctx context.Context, projectID string, through time.Time) error {
	_, err := q.exec(ctx, `DELETE FROM registry_recounts WHERE project_id = ? AND due_at <= ?`, projectID, ts(through))
	return mapErr(err)
}

const registryHoldCols = `id, project_id, repository, size_bytes, created_at, updated_at`

// GetRegistryHold reads a hold, or ErrNotFound.
func (q *Queries) GetRegistryHold(ctx context.Context, id string) (artifacts.RegistryHold, error) {
	h, err := scanRegistryHold(q.queryRow(ctx, `SELECT `+registryHoldCols+` FROM registry_holds WHERE id = ?`, id))
	return h, scanOne(err)
}

func scanRegistryHold(s interface{ Scan(...any) error }) (artifacts.RegistryHold, error) {
	var h artifacts.RegistryHold
	err := s.Scan(&h.ID, &h.ProjectID, &h.Repository, &h.SizeBytes, scanTime(&h.CreatedAt), scanTime(&h.UpdatedAt))
	return h, err
}

// PutRegistryHold writes a hold's size and time, creating it if new.
func (q *Queries) PutRegistryHold(ctx context.Context, h artifacts.RegistryHold) error {
	_, err := q.exec(ctx, `INSERT INTO registry_holds (`+registryHoldCols+`) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET size_bytes = excluded.size_bytes, updated_at = excluded.updated_at`,
		h.ID, h.ProjectID, h.Repository, h.SizeBytes, ts(h.CreatedAt), ts(h.UpdatedAt))
	return mapErr(err)
}

// ShrinkRegistryHold gives back n bytes of a hold (never below zero).
func (q *Queries) ShrinkRegistryHold(ctx context.Context, id string, n int64) error {
	_, err := q.exec(ctx, `UPDATE registry_holds SET size_bytes = CASE WHEN size_bytes > ? THEN size_bytes - ? ELSE 0 END WHERE id = ?`, n, n, id)
	return mapErr(err)
}

// DeleteRegistryHold forgets a hold; none is fine.
func (q *Queries) DeleteRegistryHold(ctx context.Context, id string) error {
	_, err := q.exec(ctx, `DELETE FROM registry_holds WHERE id = ?`, id)
	return mapErr(err)
}

// StaleRegistryHolds returns up to limit holds last written before before,
// oldest first. Holds are writes in progress, a handful per pushing
// project, so the scan needs no index of its own.
func (q *Queries) StaleRegistryHolds(ctx context.Context, before time.Time, limit int) ([]artifacts.RegistryHold, error) {
	rows, err := q.query(ctx, `SELECT `+registryHoldCols+` FROM registry_holds WHERE updated_at < ? ORDER BY updated_at, id LIMIT ?`, ts(before), limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanRegistryHold)
}
