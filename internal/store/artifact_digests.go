package store

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
)

// A digest, not a record, is what revocation means: these queries answer
// and apply revocation for every artifact record that names a digest.

// DigestRevoked reports whether any artifact of the project with digest is
// revoked.
func (q *Queries) DigestRevoked(ctx context.Context, projectID, digest string) (bool, error) {
	var n int
	err := q.queryRow(ctx, `SELECT COUNT(*) FROM app_artifacts WHERE project_id = ? AND digest = ? AND revoked_at IS NOT NULL`, projectID, digest).Scan(&n)
	return n > 0, mapErr(err)
}

// DigestRevocation returns when and why digest was first revoked in the
// project, or ErrNotFound.
func (q *Queries) DigestRevocation(ctx context.Context, projectID, digest string) (time.Time, string, error) {
	var at time.Time
	var reason string
	err := q.queryRow(ctx, `SELECT revoked_at, revoke_reason FROM app_artifacts WHERE project_id = ? AND digest = ? AND revoked_at IS NOT NULL
		ORDER BY revoked_at, id LIMIT 1`, projectID, digest).Scan(scanTime(&at), &reason)
	return at, reason, scanOne(err)
}

// RepositoryDigestRevoked reports whether digest is revoked in the project
// repository belongs to: the rule registration applies (DigestRevoked), so
// a digest revoked through one app's repository is refused in every
// repository of its project. Repositories are the platform's, and each one
// is reached through an intent or an artifact that records it with its
// project; those rows name the project. The query starts from the digest's
// revoked rows (app_artifacts_digest; none for almost every digest asked)
// and looks for the repository among their project's intents and artifacts
// (the project_id indexes) only for those.
func (q *Queries) RepositoryDigestRevoked(ctx context.Context, repository, digest string) (bool, error) {
	var n int
	err := q.queryRow(ctx, `SELECT COUNT(*) FROM app_artifacts r WHERE r.digest = ? AND r.revoked_at IS NOT NULL AND (
		r.repository = ?
		OR EXISTS (SELECT 1 FROM app_artifacts a WHERE a.project_id = r.project_id AND a.repository = ?)
		OR EXISTS (SELECT 1 FROM artifact_intents i WHERE i.project_id = r.project_id AND i.repository = ?))`,
		digest, repository, repository, repository).Scan(&n)
	return n > 0, mapErr(err)
}

// RepositoryDigestVerified reports whether an artifact registered in
// repository with digest is verified now (a failed re-verification unlocks
// its signature tags, so the image can be signed and verified again).
func (q *Queries) RepositoryDigestVerified(ctx context.Context, repository, digest string) (bool, error) {
	var n int
	err := q.queryRow(ctx, `SELECT COUNT(*) FROM app_artifacts WHERE repository = ? AND digest = ? AND trust_state = 'verified'`, repository, digest).Scan(&n)
	return n > 0, mapErr(err)
}

// RepositoryArtifacts lists the artifacts registered in repository,
// whatever their state.
func (q *Queries) RepositoryArtifacts(ctx context.Context, repository string) ([]artifacts.AppArtifact, error) {
	rows, err := q.query(ctx, `SELECT `+appArtifactCols+` FROM app_artifacts WHERE repository = ? ORDER BY created_at, id`, repository)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAppArtifact)
}

// UnrevokedArtifactsWithDigest lists the project's artifacts with digest
// that are not revoked yet.
func (q *Queries) UnrevokedArtifactsWithDigest(ctx context.Context, projectID, digest string) ([]artifacts.AppArtifact, error) {
	rows, err := q.query(ctx, `SELECT `+appArtifactCols+` FROM app_artifacts WHERE project_id = ? AND digest = ? AND revoked_at IS NULL ORDER BY id`, projectID, digest)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAppArtifact)
}

// RevokeArtifactsWithDigest revokes every unrevoked artifact of the project
// with digest, leaving lifecycle and trust state as they are.
func (q *Queries) RevokeArtifactsWithDigest(ctx context.Context, projectID, digest, reason string, at time.Time) error {
	_, err := q.exec(ctx, `UPDATE app_artifacts SET revoked_at = ?, revoke_reason = ?, updated_at = ? WHERE project_id = ? AND digest = ? AND revoked_at IS NULL`,
		ts(at), reason, ts(at), projectID, digest)
	return mapErr(err)
}
