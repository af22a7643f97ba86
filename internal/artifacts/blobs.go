package artifacts

import (
	"context"
	"errors"
	"io"

	"github.com/gpuaas/gpuaas/internal/blobstore"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Upload is the state of a blob upload as the API reports it.
type Upload struct {
	blobstore.Upload
	IntentID  string
	SourceURI string
	Object    *blobstore.Object // after commit
}

func uploadNotFound(id string) error {
	return errdefs.NotFound("upload_not_found", "upload %q does not exist in this project (or was committed or aborted)", id)
}

// upload resolves the publish intent that owns uploadID in the project.
func (s *Service) upload(ctx context.Context, g *iam.Grants, projectID, uploadID, perm string, live bool) (ArtifactIntent, error) {
	p, err := s.IAM.Project(ctx, g, projectID, perm)
	if err != nil {
		return ArtifactIntent{}, err
	}
	if s.Blobs == nil {
		return ArtifactIntent{}, errdefs.FailedPrecondition("blob_store_unavailable", "this server has no blob store configured")
	}
	if uploadID == "" || len(uploadID) > 128 {
		return ArtifactIntent{}, uploadNotFound(uploadID)
	}
	it, err := s.Store.Read().ArtifactIntentByUpload(ctx, p.ID, uploadID)
	if errors.Is(err, storage.ErrNotFound) {
		return ArtifactIntent{}, uploadNotFound(uploadID)
	}
	if err != nil {
		return ArtifactIntent{}, err
	}
	if live && !s.Now().Before(it.ExpiresAt) {
		return ArtifactIntent{}, errdefs.FailedPrecondition("intent_expired", "publish intent %s expired; request a new one and upload again", it.ID)
	}
	return it, nil
}

// UploadStatus reports where an upload resumes.
func (s *Service) UploadStatus(ctx context.Context, g *iam.Grants, projectID, uploadID string) (Upload, error) {
	it, err := s.upload(ctx, g, projectID, uploadID, iam.PermArtifactWrite, false)
	if err != nil {
		return Upload{}, err
	}
	return s.uploadState(ctx, it, uploadID)
}

// uploadState reads the blob store's state of an upload the caller resolved.
func (s *Service) uploadState(ctx context.Context, it ArtifactIntent, uploadID string) (Upload, error) {
	u, err := s.Blobs.Status(ctx, uploadID)
	if errors.Is(err, blobstore.ErrNotFound) {
		return Upload{}, uploadNotFound(uploadID)
	}
	if err != nil {
		return Upload{}, err
	}
	return Upload{Upload: u, IntentID: it.ID, SourceURI: it.SourceURI}, nil
}

// appendAt streams body into the upload at offset, or at its current end
// when offset is negative. It returns where the chunk started and the new size.
func (s *Service) appendAt(ctx context.Context, it ArtifactIntent, uploadID string, offset int64, body io.Reader) (from, size int64, err error) {
	if offset < 0 {
		st, err := s.uploadState(ctx, it, uploadID)
		if err != nil {
			return 0, 0, err
		}
		offset = st.Offset
	}
	if s.BlobQuota != nil {
		room, limit, err := s.quotaRoom(ctx, it.ProjectID, offset)
		if err != nil {
			return 0, 0, err
		}
		// One byte past the room makes an over-quota upload fail in the
		// store's append instead of being silently truncated.
		body = &quotaReader{r: io.LimitReader(body, room+1), room: room, limit: limit}
	}
	size, err = s.Blobs.Append(ctx, uploadID, offset, body)
	var over *quotaError
	if errors.As(err, &over) {
		_ = s.Blobs.Abort(ctx, uploadID)
		return 0, 0, errdefs.Unprocessable("blob_quota_exceeded",
			"this upload would take project %s past its blob storage quota of %d bytes; delete or retire blob artifacts, or ask an admin to raise the quota", it.ProjectID, over.limit)
	}
	return offset, size, err
}

// BlobQuota says how many bytes of committed blob artifacts a project may
// hold in all.
type BlobQuota interface {
	BlobQuotaBytes(ctx context.Context, projectID string) (int64, error)
}

func (s *Service) quotaRoom(ctx context.Context, projectID string, offset int64) (room, limit int64, err error) {
	limit, err = s.BlobQuota.BlobQuotaBytes(ctx, projectID)
	if err != nil {
		return 0, 0, err
	}
	used, err := s.Store.Read().ProjectBlobBytes(ctx, projectID)
	if err != nil {
		return 0, 0, err
	}
	room = limit - used - offset
	if room < 0 {
		return 0, 0, errdefs.Unprocessable("blob_quota_exceeded",
			"project %s already holds %d bytes of blobs against a quota of %d bytes", projectID, used, limit)
	}
	return room, limit, nil
}

// StaticBlobQuota gives every project the same blob storage quota.
type StaticBlobQuota int64

// BlobQuotaBytes implements BlobQuota.
func (q StaticBlobQuota) BlobQuotaBytes(context.Context, string) (int64, error) { return int64(q), nil }

type quotaError struct{ limit int64 }

func (e *quotaError) Error() string { return "blob quota exceeded" }

// quotaReader fails once more than room bytes have been read.
type quotaReader struct {
	r           io.Reader
	room, limit int64
	read        int64
}

func (q *quotaReader) Read(p []byte) (int, error) {
	n, err := q.r.Read(p)
	q.read += int64(n)
	if q.read > q.room {
		return n, &quotaError{limit: q.limit}
	}
	return n, err
}

// AppendUpload streams body into the upload at offset (which must be the
// upload's current size; negative means wherever it currently ends).
// Nothing is buffered beyond one copy buffer.
func (s *Service) AppendUpload(ctx context.Context, g *iam.Grants, projectID, uploadID string, offset int64, body io.Reader) (Upload, error) {
	it, err := s.upload(ctx, g, projectID, uploadID, iam.PermArtifactWrite, true)
	if err != nil {
		return Upload{}, err
	}
	from, n, err := s.appendAt(ctx, it, uploadID, offset, body)
	if err != nil {
		return Upload{}, err
	}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		return tx.Audit(storage.AuditEvent{Action: "artifact.upload.append", ResourceType: "artifact_upload", ResourceID: uploadID,
			OrgID: it.OrgID, ProjectID: it.ProjectID}, nil, map[string]any{"intent_id": it.ID, "from": from, "offset": n})
	})
	if err != nil {
		return Upload{}, err
	}
	return s.uploadState(ctx, it, uploadID)
}

// CommitUpload appends an optional last chunk and commits the upload with
// its expected digest (sha256 computed while streaming). A mismatch deletes
// the upload.
func (s *Service) CommitUpload(ctx context.Context, g *iam.Grants, projectID, uploadID string, offset int64, body io.Reader, digest string) (Upload, error) {
	it, err := s.upload(ctx, g, projectID, uploadID, iam.PermArtifactWrite, true)
	if err != nil {
		return Upload{}, err
	}
	if _, err := ParseDigest(digest); err != nil {
		return Upload{}, errdefs.Invalid("invalid_digest", "pass the expected digest as ?digest=sha256:<64 lowercase hex>")
	}
	if body != nil {
		if _, _, err := s.appendAt(ctx, it, uploadID, offset, body); err != nil {
			return Upload{}, err
		}
	}
	obj, err := s.Blobs.Commit(ctx, uploadID, digest)
	if err != nil {
		return Upload{}, err
	}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		return tx.Audit(storage.AuditEvent{Action: "artifact.upload.commit", ResourceType: "artifact_upload", ResourceID: uploadID,
			OrgID: it.OrgID, ProjectID: it.ProjectID}, nil, map[string]any{"intent_id": it.ID, "source_uri": it.SourceURI, "digest": obj.Digest, "size": obj.Size})
	})
	if err != nil {
		return Upload{}, err
	}
	return Upload{Upload: blobstore.Upload{ID: uploadID, Key: obj.Key, Offset: obj.Size, CreatedAt: obj.CommittedAt, UpdatedAt: obj.CommittedAt},
		IntentID: it.ID, SourceURI: it.SourceURI, Object: &obj}, nil
}

// AbortUpload deletes an upload's partial data.
func (s *Service) AbortUpload(ctx context.Context, g *iam.Grants, projectID, uploadID string) error {
	it, err := s.upload(ctx, g, projectID, uploadID, iam.PermArtifactWrite, false)
	if err != nil {
		return err
	}
	if err := s.Blobs.Abort(ctx, uploadID); err != nil {
		if errors.Is(err, blobstore.ErrNotFound) {
			return uploadNotFound(uploadID)
		}
		return err
	}
	return s.Store.Mutate(ctx, func(tx Tx) error {
		return tx.Audit(storage.AuditEvent{Action: "artifact.upload.abort", ResourceType: "artifact_upload", ResourceID: uploadID,
			OrgID: it.OrgID, ProjectID: it.ProjectID}, nil, map[string]any{"intent_id": it.ID})
	})
}

// OpenContent streams a registered blob artifact. Revoked and retired
// artifacts are refused.
func (s *Service) OpenContent(ctx context.Context, g *iam.Grants, projectID, artifactID string) (AppArtifact, io.ReadCloser, error) {
	_, a, err := s.artifact(ctx, g, projectID, artifactID, iam.PermArtifactRead)
	if err != nil {
		return a, nil, err
	}
	if a.ArtifactKind != KindBlob {
		return a, nil, errdefs.FailedPrecondition("not_a_blob", "artifact %s is an OCI image; pull it from the registry with a pull intent", a.ID)
	}
	if err := refuseRevoked(a); err != nil {
		return a, nil, err
	}
	if a.LifecycleState == StateRetired {
		return a, nil, errdefs.FailedPrecondition("artifact_retired", "artifact %s is retired", a.ID)
	}
	key, err := blobstore.ParseURI(a.SourceURI)
	if err != nil {
		return a, nil, err
	}
	rc, err := s.Blobs.Open(ctx, key)
	return a, rc, err
}
