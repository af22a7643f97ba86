package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/nodes"
)

var (
	_ artifacts.Tx      = (*Tx)(nil)
	_ artifacts.Queries = (*Queries)(nil)
)

// Artifacts is the artifacts domain's storage.
func Artifacts(db *DB) artifacts.Store { return NewPort[artifacts.Tx, artifacts.Queries](db) }

const artifactSigningKeyCols = `id, org_id, project_id, name, algorithm, public_key, fingerprint, created_by, created_at`

func scanArtifactSigningKey(s interface{ Scan(...any) error }) (artifacts.ArtifactSigningKey, error) {
	var k artifacts.ArtifactSigningKey
	err := s.Scan(&k.ID, &k.OrgID, &k.ProjectID, &k.Name, &k.Algorithm, &k.PublicKey, &k.Fingerprint, &k.CreatedBy, scanTime(&k.CreatedAt))
	return k, err
}

func (q *Queries) InsertArtifactSigningKey(ctx context.Context, k artifacts.ArtifactSigningKey) error {
	_, err := q.exec(ctx, `INSERT INTO artifact_signing_keys (`+artifactSigningKeyCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.OrgID, k.ProjectID, k.Name, k.Algorithm, k.PublicKey, k.Fingerprint, k.CreatedBy, ts(k.CreatedAt))
	return err
}

func (q *Queries) GetArtifactSigningKey(ctx context.Context, projectID, id string) (artifacts.ArtifactSigningKey, error) {
	k, err := scanArtifactSigningKey(q.queryRow(ctx, `SELECT `+artifactSigningKeyCols+` FROM artifact_signing_keys WHERE project_id = ? AND id = ?`, projectID, id))
	return k, scanOne(err)
}

// ListArtifactSigningKeys lists a project's keys in creation order.
func (q *Queries) ListArtifactSigningKeys(ctx context.Context, projectID string, p Page) ([]artifacts.ArtifactSigningKey, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+artifactSigningKeyCols+` FROM artifact_signing_keys WHERE project_id = ? AND id > ? ORDER BY id`+limitClause(limit), projectID, after)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanArtifactSigningKey)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(k artifacts.ArtifactSigningKey) string { return k.ID })
	return out, next, nil
}

// AllArtifactSigningKeys returns every key of a project (verification uses all).
func (q *Queries) AllArtifactSigningKeys(ctx context.Context, projectID string) ([]artifacts.ArtifactSigningKey, error) {
	rows, err := q.query(ctx, `SELECT `+artifactSigningKeyCols+` FROM artifact_signing_keys WHERE project_id = ? ORDER BY id`, projectID)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanArtifactSigningKey)
}

const artifactIntentCols = `id, kind, org_id, project_id, artifact_kind, source_type, app_slug, app_version, artifact_name, channel,
	repository, tag_hint, source_uri, upload_id, artifact_id, signature_required, signature_scheme, signing_key_id,
	provenance_required, created_by, created_at, expires_at, creator_token_issued_us, creator_key_id`

func scanArtifactIntent(s interface{ Scan(...any) error }) (artifacts.ArtifactIntent, error) {
	var i artifacts.ArtifactIntent
	err := s.Scan(&i.ID, &i.Kind, &i.OrgID, &i.ProjectID, &i.ArtifactKind, &i.SourceType, &i.AppSlug, &i.AppVersion, &i.ArtifactName, &i.Channel,
		&i.Repository, &i.TagHint, &i.SourceURI, &i.UploadID, &i.ArtifactID, &i.SignatureRequired, &i.SignatureScheme, &i.SigningKeyID,
		&i.ProvenanceRequired, &i.CreatedBy, scanTime(&i.CreatedAt), scanTime(&i.ExpiresAt), &i.CreatorTokenIssuedUS, &i.CreatorKeyID)
	return i, err
}

func (q *Queries) InsertArtifactIntent(ctx context.Context, i artifacts.ArtifactIntent) error {
	_, err := q.exec(ctx, `INSERT INTO artifact_intents (`+artifactIntentCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		i.ID, i.Kind, i.OrgID, i.ProjectID, i.ArtifactKind, i.SourceType, i.AppSlug, i.AppVersion, i.ArtifactName, i.Channel,
		i.Repository, i.TagHint, i.SourceURI, i.UploadID, i.ArtifactID, i.SignatureRequired, i.SignatureScheme, i.SigningKeyID,
		i.ProvenanceRequired, i.CreatedBy, ts(i.CreatedAt), ts(i.ExpiresAt), i.CreatorTokenIssuedUS, i.CreatorKeyID)
	return err
}

func (q *Queries) GetArtifactIntent(ctx context.Context, projectID, id string) (artifacts.ArtifactIntent, error) {
	i, err := scanArtifactIntent(q.queryRow(ctx, `SELECT `+artifactIntentCols+` FROM artifact_intents WHERE project_id = ? AND id = ?`, projectID, id))
	return i, scanOne(err)
}

// ArtifactIntentByUpload finds the publish intent that owns a blob upload.
func (q *Queries) ArtifactIntentByUpload(ctx context.Context, projectID, uploadID string) (artifacts.ArtifactIntent, error) {
	i, err := scanArtifactIntent(q.queryRow(ctx, `SELECT `+artifactIntentCols+` FROM artifact_intents WHERE project_id = ? AND upload_id = ? AND kind = 'publish'`, projectID, uploadID))
	return i, scanOne(err)
}

// LatestPublishIntent finds the newest publish intent for an artifact slot.
func (q *Queries) LatestPublishIntent(ctx context.Context, projectID, appSlug, appVersion, artifactName, artifactKind string) (artifacts.ArtifactIntent, error) {
	i, err := scanArtifactIntent(q.queryRow(ctx, `SELECT `+artifactIntentCols+` FROM artifact_intents
		WHERE project_id = ? AND kind = 'publish' AND app_slug = ? AND app_version = ? AND artifact_name = ? AND artifact_kind = ?
		ORDER BY id DESC LIMIT 1`, projectID, appSlug, appVersion, artifactName, artifactKind))
	return i, scanOne(err)
}

const registryCredentialCols = `id, intent_id, project_id, artifact_id, repository, actions, secret_hash, created_at, expires_at`

func (q *Queries) InsertRegistryCredential(ctx context.Context, c artifacts.RegistryCredential) error {
	_, err := q.exec(ctx, `INSERT INTO registry_credentials (`+registryCredentialCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.ID, c.IntentID, c.ProjectID, c.ArtifactID, c.Repository, c.Actions, c.SecretHash, ts(c.CreatedAt), ts(c.ExpiresAt))
	return err
}

func (q *Queries) GetRegistryCredential(ctx context.Context, id string) (artifacts.RegistryCredential, error) {
	var c artifacts.RegistryCredential
	err := q.queryRow(ctx, `SELECT `+registryCredentialCols+` FROM registry_credentials WHERE id = ?`, id).Scan(
		&c.ID, &c.IntentID, &c.ProjectID, &c.ArtifactID, &c.Repository, &c.Actions, &c.SecretHash, scanTime(&c.CreatedAt), scanTime(&c.ExpiresAt))
	return c, scanOne(err)
}

func (q *Queries) InsertCredentialWrap(ctx context.Context, w artifacts.CredentialWrap) error {
	_, err := q.exec(ctx, `INSERT INTO credential_wraps (token_hash, sealed, created_at, expires_at, used_at) VALUES (?, ?, ?, ?, ?)`,
		w.TokenHash, w.Sealed, ts(w.CreatedAt), ts(w.ExpiresAt), nullTS(w.UsedAt))
	return err
}

// ConsumeCredentialWrap marks an unused, unexpired wrap used and returns its
// sealed secret, erasing it from the row. A wrap consumes exactly once:
// a second call (or an expired wrap) is ErrNotFound.
func (q *Queries) ConsumeCredentialWrap(ctx context.Context, tokenHash string, now time.Time) (string, error) {
	var sealed string
	err := q.queryRow(ctx, `SELECT sealed FROM credential_wraps WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?`, tokenHash, ts(now)).Scan(&sealed)
	if err := scanOne(err); err != nil {
		return "", err
	}
	if err := q.execOne(ctx, `UPDATE credential_wraps SET used_at = ?, sealed = '' WHERE token_hash = ? AND used_at IS NULL`, ts(now), tokenHash); err != nil {
		return "", err
	}
	return sealed, nil
}

const appArtifactCols = `id, org_id, project_id, app_slug, app_version, artifact_name, artifact_kind, source_type, repository, digest,
	tag, media_type, size_bytes, source_uri, source_metadata, publish_intent_id, lifecycle_state, trust_state, trust_reason,
	trust_detail, verified_key_id, verified_at, signature_required, signature_scheme, signing_key_id, provenance_required,
	revoked_at, revoke_reason, created_by, created_at, updated_at`

func scanAppArtifact(s interface{ Scan(...any) error }) (artifacts.AppArtifact, error) {
	var a artifacts.AppArtifact
	err := s.Scan(&a.ID, &a.OrgID, &a.ProjectID, &a.AppSlug, &a.AppVersion, &a.ArtifactName, &a.ArtifactKind, &a.SourceType, &a.Repository, &a.Digest,
		&a.Tag, &a.MediaType, &a.SizeBytes, &a.SourceURI, scanJSON(&a.SourceMetadata), &a.PublishIntentID, &a.LifecycleState, &a.TrustState, &a.TrustReason,
		&a.TrustDetail, &a.VerifiedKeyID, scanTime(&a.VerifiedAt), &a.SignatureRequired, &a.SignatureScheme, &a.SigningKeyID, &a.ProvenanceRequired,
		scanTime(&a.RevokedAt), &a.RevokeReason, &a.CreatedBy, scanTime(&a.CreatedAt), scanTime(&a.UpdatedAt))
	return a, err
}

func (q *Queries) InsertAppArtifact(ctx context.Context, a artifacts.AppArtifact) error {
	_, err := q.exec(ctx, `INSERT INTO app_artifacts (`+appArtifactCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.ID, a.OrgID, a.ProjectID, a.AppSlug, a.AppVersion, a.ArtifactName, a.ArtifactKind, a.SourceType, a.Repository, a.Digest,
		a.Tag, a.MediaType, a.SizeBytes, a.SourceURI, jsonText(a.SourceMetadata), a.PublishIntentID, string(a.LifecycleState), string(a.TrustState), a.TrustReason,
		a.TrustDetail, a.VerifiedKeyID, nullTS(a.VerifiedAt), a.SignatureRequired, a.SignatureScheme, a.SigningKeyID, a.ProvenanceRequired,
		nullTS(a.RevokedAt), a.RevokeReason, a.CreatedBy, ts(a.CreatedAt), ts(a.UpdatedAt))
	return err
}

func (q *Queries) GetAppArtifact(ctx context.Context, projectID, id string) (artifacts.AppArtifact, error) {
	a, err := scanAppArtifact(q.queryRow(ctx, `SELECT `+appArtifactCols+` FROM app_artifacts WHERE project_id = ? AND id = ?`, projectID, id))
	return a, scanOne(err)
}

// ShareAppArtifact reads an artifact and keeps its state from changing
// until the transaction ends; other transactions may share it at once.
func (q *Queries) ShareAppArtifact(ctx context.Context, id string) (artifacts.AppArtifact, error) {
	a, err := scanAppArtifact(q.queryRow(ctx, `SELECT `+appArtifactCols+` FROM app_artifacts WHERE id = ?`+q.forShare(), id))
	return a, scanOne(err)
}

// UpdateAppArtifactState writes the lifecycle and trust columns of a, but
// only if the row still has the lifecycle and trust state the caller read
// (prevState, prevTrust, prevRevoked): a concurrent transition makes it
// ErrNotFound, which the domain reports as a conflict.
func (q *Queries) UpdateAppArtifactState(ctx context.Context, a artifacts.AppArtifact, prevState artifacts.LifecycleState, prevTrust artifacts.TrustState, prevRevoked bool) error {
	cond := `revoked_at IS NULL`
	if prevRevoked {
		cond = `revoked_at IS NOT NULL`
	}
	return q.execOne(ctx, `UPDATE app_artifacts SET lifecycle_state = ?, trust_state = ?, trust_reason = ?, trust_detail = ?,
		verified_key_id = ?, verified_at = ?, revoked_at = ?, revoke_reason = ?, updated_at = ?
		WHERE id = ? AND lifecycle_state = ? AND trust_state = ? AND `+cond,
		string(a.LifecycleState), string(a.TrustState), a.TrustReason, a.TrustDetail, a.VerifiedKeyID, nullTS(a.VerifiedAt), nullTS(a.RevokedAt),
		a.RevokeReason, ts(a.UpdatedAt), a.ID, string(prevState), string(prevTrust))
}

func (q *Queries) ListAppArtifacts(ctx context.Context, projectID string, f artifacts.AppArtifactFilter, p Page) ([]artifacts.AppArtifact, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	query := `SELECT ` + appArtifactCols + ` FROM app_artifacts WHERE project_id = ? AND id > ?`
	args := []any{projectID, after}
	for _, c := range []struct{ col, v string }{
		{"app_slug", f.AppSlug}, {"app_version", f.AppVersion}, {"artifact_name", f.ArtifactName},
		{"lifecycle_state", string(f.LifecycleState)}, {"trust_state", string(f.TrustState)},
	} {
		if c.v != "" {
			query += ` AND ` + c.col + ` = ?`
			args = append(args, c.v)
		}
	}
	rows, err := q.query(ctx, query+` ORDER BY id`+limitClause(limit), args...)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanAppArtifact)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(a artifacts.AppArtifact) string { return a.ID })
	return out, next, nil
}

// LiveAppArtifactsOfVersion lists the unrevoked artifacts registered for an
// app version in any project (the catalog's publish gate reads them).
func (q *Queries) LiveAppArtifactsOfVersion(ctx context.Context, appSlug, appVersion string) ([]artifacts.AppArtifact, error) {
	rows, err := q.query(ctx, `SELECT `+appArtifactCols+` FROM app_artifacts WHERE app_slug = ? AND app_version = ? AND revoked_at IS NULL ORDER BY id`, appSlug, appVersion)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanAppArtifact)
}

// LockProjectBlobUsage takes the project's row (FOR NO KEY UPDATE on
// PostgreSQL: inserts that only reference the project still go ahead;
// SQLite's BEGIN IMMEDIATE already serialises every mutation).
func (q *Queries) LockProjectBlobUsage(ctx context.Context, projectID string) error {
	lock := ""
	if q.d == Postgres {
		lock = " FOR NO KEY UPDATE"
	}
	var id string
	return scanOne(q.queryRow(ctx, `SELECT id FROM projects WHERE id = ?`+lock, projectID).Scan(&id))
}

// ProjectBlobUsage sums what counts against a project's blob quota. A
// committed upload whose key a registered artifact holds is the same
// content committed again (keys are write-once), so it adds nothing.
func (q *Queries) ProjectBlobUsage(ctx context.Context, projectID, exceptUploadID string) (int64, error) {
	var artifactsBytes, uploadBytes int64
	err := q.queryRow(ctx, `SELECT COALESCE(SUM(size_bytes), 0) FROM app_artifacts WHERE project_id = ? AND artifact_kind = 'blob'`, projectID).Scan(&artifactsBytes)
	if err != nil {
		return 0, mapErr(err)
	}
	err = q.queryRow(ctx, `SELECT COALESCE(SUM(u.bytes), 0) FROM blob_uploads u
		WHERE u.project_id = ? AND u.upload_id <> ? AND (u.state = 'uploading' OR (u.state = 'committed' AND NOT EXISTS (
			SELECT 1 FROM app_artifacts a WHERE a.project_id = u.project_id AND a.artifact_kind = 'blob' AND a.source_uri = u.source_uri)))`,
		projectID, exceptUploadID).Scan(&uploadBytes)
	return artifactsBytes + uploadBytes, mapErr(err)
}

const blobUploadCols = `upload_id, project_id, intent_id, source_uri, state, bytes, digest, created_at, updated_at`

func scanBlobUpload(s interface{ Scan(...any) error }) (artifacts.BlobUpload, error) {
	var u artifacts.BlobUpload
	err := s.Scan(&u.UploadID, &u.ProjectID, &u.IntentID, &u.SourceURI, &u.State, &u.Bytes, &u.Digest, scanTime(&u.CreatedAt), scanTime(&u.UpdatedAt))
	return u, err
}

func (q *Queries) PutBlobUpload(ctx context.Context, u artifacts.BlobUpload) error {
	_, err := q.exec(ctx, `INSERT INTO blob_uploads (`+blobUploadCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (upload_id) DO UPDATE SET state = excluded.state, bytes = excluded.bytes, digest = excluded.digest, updated_at = excluded.updated_at`,
		u.UploadID, u.ProjectID, u.IntentID, u.SourceURI, string(u.State), u.Bytes, u.Digest, ts(u.CreatedAt), ts(u.UpdatedAt))
	return err
}

// ReserveBlobUpload's conditional update is what keeps an append's late
// bookkeeping (it runs after the blob store released the upload) from
// turning a row a commit or the sweeper moved on back into 'uploading'.
func (q *Queries) ReserveBlobUpload(ctx context.Context, u artifacts.BlobUpload) (bool, error) {
	res, err := q.exec(ctx, `INSERT INTO blob_uploads (`+blobUploadCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (upload_id) DO UPDATE SET bytes = excluded.bytes, digest = excluded.digest, updated_at = excluded.updated_at
		WHERE blob_uploads.state = 'uploading'`,
		u.UploadID, u.ProjectID, u.IntentID, u.SourceURI, string(artifacts.BlobUploading), u.Bytes, u.Digest, ts(u.CreatedAt), ts(u.UpdatedAt))
	return rowsWritten(res, err)
}

func (q *Queries) SetUploadingBlobBytes(ctx context.Context, uploadID string, bytes int64, at time.Time) (bool, error) {
	res, err := q.exec(ctx, `UPDATE blob_uploads SET bytes = ?, updated_at = ? WHERE upload_id = ? AND state = 'uploading'`, bytes, ts(at), uploadID)
	return rowsWritten(res, err)
}

func (q *Queries) DeleteSweptBlobUploads(ctx context.Context, cutoff time.Time) (int64, error) {
	res, err := q.exec(ctx, `DELETE FROM blob_uploads WHERE state = 'swept' AND updated_at < ?`, ts(cutoff))
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return n, mapErr(err)
}

func rowsWritten(res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, mapErr(err)
}

func (q *Queries) GetBlobUpload(ctx context.Context, uploadID string) (artifacts.BlobUpload, error) {
	u, err := scanBlobUpload(q.queryRow(ctx, `SELECT `+blobUploadCols+` FROM blob_uploads WHERE upload_id = ?`+q.forUpdate(), uploadID))
	return u, scanOne(err)
}

func (q *Queries) DeleteBlobUpload(ctx context.Context, uploadID string) error {
	_, err := q.exec(ctx, `DELETE FROM blob_uploads WHERE upload_id = ?`, uploadID)
	return err
}

func (q *Queries) ClaimCommittedBlob(ctx context.Context, projectID, sourceURI, digest string) (int64, error) {
	res, err := q.exec(ctx, `DELETE FROM blob_uploads WHERE project_id = ? AND source_uri = ? AND digest = ? AND state = 'committed'`, projectID, sourceURI, digest)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return n, mapErr(err)
}

func (q *Queries) BlobContentSwept(ctx context.Context, projectID, sourceURI, digest string) (bool, error) {
	return q.exists(ctx, `SELECT 1 FROM blob_uploads WHERE project_id = ? AND source_uri = ? AND digest = ? AND state IN ('sweeping', 'swept')`, projectID, sourceURI, digest)
}

func (q *Queries) StaleBlobUploads(ctx context.Context, state artifacts.BlobUploadState, cutoff time.Time, limit int) ([]artifacts.BlobUpload, error) {
	rows, err := q.query(ctx, `SELECT `+blobUploadCols+` FROM blob_uploads WHERE state = ? AND updated_at < ? ORDER BY updated_at, upload_id LIMIT ?`,
		string(state), ts(cutoff), limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanBlobUpload)
}

func (q *Queries) BlobSourceRegistered(ctx context.Context, projectID, sourceURI string) (bool, error) {
	return q.exists(ctx, `SELECT 1 FROM app_artifacts WHERE project_id = ? AND artifact_kind = 'blob' AND source_uri = ?`, projectID, sourceURI)
}

func (q *Queries) BlobContentHeld(ctx context.Context, digest, exceptUploadID string) (bool, error) {
	// The platform's own releases share the content-addressed blobs.
	for _, query := range []string{
		`SELECT 1 FROM app_artifacts WHERE artifact_kind = 'blob' AND digest = ?`,
		`SELECT 1 FROM platform_release_artifacts WHERE digest = ?`,
	} {
		held, err := q.exists(ctx, query, digest)
		if err != nil || held {
			return held, err
		}
	}
	return q.exists(ctx, `SELECT 1 FROM blob_uploads WHERE digest = ? AND upload_id <> ? AND state IN ('uploading', 'committed')`, digest, exceptUploadID)
}

func (q *Queries) OtherBlobUploadAt(ctx context.Context, sourceURI, digest, uploadID string) (bool, error) {
	return q.exists(ctx, `SELECT 1 FROM blob_uploads WHERE source_uri = ? AND digest = ? AND upload_id <> ? AND state IN ('uploading', 'committed')`,
		sourceURI, digest, uploadID)
}

// exists reports whether query (a SELECT 1 ...) finds a row.
func (q *Queries) exists(ctx context.Context, query string, args ...any) (bool, error) {
	var one int
	err := q.queryRow(ctx, query+` LIMIT 1`, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, mapErr(err)
}

// ArtifactOwnerAccount reads what the artifacts domain's registry re-check
// needs of a service account that owns an intent.
func (q *Queries) ArtifactOwnerAccount(ctx context.Context, id string) (artifacts.OwnerAccount, error) {
	a, err := q.GetServiceAccount(ctx, id)
	if err != nil {
		return artifacts.OwnerAccount{}, err
	}
	return artifacts.OwnerAccount{ID: a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID, Status: a.Status}, nil
}

// ArtifactOwnerNodeState reads the state of a node that owns a pull intent.
func (q *Queries) ArtifactOwnerNodeState(ctx context.Context, id string) (nodes.NodeState, error) {
	n, err := q.GetNode(ctx, id)
	if err != nil {
		return "", err
	}
	return n.State, nil
}
