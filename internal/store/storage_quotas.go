package store

import (
	"context"
	"database/sql"

	"github.com/gpuaas/gpuaas/internal/artifacts"
)

// Per-project overrides of the storage quotas (artifacts.StorageQuota),
// and the blob usage a project is shown.

const storageQuotaCols = `project_id, blob_quota_bytes, registry_quota_bytes, updated_by, updated_at`

// GetStorageQuota returns the project's override, or ErrNotFound.
func (q *Queries) GetStorageQuota(ctx context.Context, projectID string) (artifacts.StorageQuota, error) {
	var (
		o              artifacts.StorageQuota
		blob, registry sql.NullInt64
	)
	err := q.queryRow(ctx, `SELECT `+storageQuotaCols+` FROM project_storage_quotas WHERE project_id = ?`, projectID).Scan(
		&o.ProjectID, &blob, &registry, &o.UpdatedBy, scanTime(&o.UpdatedAt))
	if blob.Valid {
		o.BlobBytes = &blob.Int64
	}
	if registry.Valid {
		o.RegistryBytes = &registry.Int64
	}
	return o, scanOne(err)
}

// PutStorageQuota creates or replaces the project's override.
func (q *Queries) PutStorageQuota(ctx context.Context, o artifacts.StorageQuota) error {
	_, err := q.exec(ctx, `INSERT INTO project_storage_quotas (`+storageQuotaCols+`) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (project_id) DO UPDATE SET blob_quota_bytes = excluded.blob_quota_bytes,
		registry_quota_bytes = excluded.registry_quota_bytes, updated_by = excluded.updated_by, updated_at = excluded.updated_at`,
		o.ProjectID, nullInt(o.BlobBytes), nullInt(o.RegistryBytes), o.UpdatedBy, ts(o.UpdatedAt))
	return mapErr(err)
}

// DeleteStorageQuota forgets the project's override; none is fine.
func (q *Queries) DeleteStorageQuota(ctx context.Context, projectID string) error {
	_, err := q.exec(ctx, `DELETE FROM project_storage_quotas WHERE project_id = ?`, projectID)
	return mapErr(err)
}

// ProjectBlobUsageParts splits what ProjectBlobUsage sums, by the same
// rules: a committed upload whose content a registered artifact holds
// adds nothing.
func (q *Queries) ProjectBlobUsageParts(ctx context.Context, projectID string) (artifacts.BlobUsage, error) {
	var u artifacts.BlobUsage
	err := q.queryRow(ctx, `SELECT
		(SELECT COALESCE(SUM(size_bytes), 0) FROM app_artifacts WHERE project_id = ? AND artifact_kind = 'blob'),
		(SELECT COALESCE(SUM(u.bytes), 0) FROM blob_uploads u WHERE u.project_id = ? AND u.state = 'committed' AND NOT EXISTS (
			SELECT 1 FROM app_artifacts a WHERE a.project_id = u.project_id AND a.artifact_kind = 'blob' AND a.source_uri = u.source_uri)),
		(SELECT COALESCE(SUM(bytes), 0) FROM blob_uploads WHERE project_id = ? AND state = 'uploading')`,
		projectID, projectID, projectID).Scan(&u.Registered, &u.Unregistered, &u.Uploading)
	return u, mapErr(err)
}
