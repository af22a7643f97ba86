package artifacts

import (
	"context"
	"errors"
	"io"

	"github.com/gpuaas/gpuaas/internal/blobstore"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/quotastream"
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
	// Every upload reserves, with or without a quota in force now: a
	// platform admin may set one for the project while it streams, and
	// its next chunk is held to it. Positions in the reader count from
	// offset. Nothing is released through it: what the upload holds after
	// the append is set to the store's size below, which the reader cannot
	// know (a failed write keeps fewer bytes than it read).
	body = quotastream.New(body, 0, func(_, need, want int64) (int64, error) {
		granted, err := s.reserveUpload(ctx, it, uploadID, offset+need, offset+want)
		return granted - offset, err
	}, nil)
	size, err = s.Blobs.Append(ctx, uploadID, offset, body)
	// An upload past the quota or the object size limit can never be
	// committed: its partial data is purged and its reservation released.
	var over *quotaError
	if tooLarge := errors.Is(err, blobstore.ErrTooLarge); tooLarge || errors.As(err, &over) {
		ctx := context.WithoutCancel(ctx)
		_ = s.Blobs.Abort(ctx, uploadID)
		if derr := s.Store.InTx(ctx, func(q Queries) error { return q.DeleteBlobUpload(ctx, uploadID) }); derr != nil {
			s.Logger.WarnContext(ctx, "could not release an aborted upload's quota reservation", "upload_id", uploadID, "err", derr)
		}
		if tooLarge {
			return 0, 0, err
		}
		return 0, 0, over.err
	}
	if !errors.Is(err, blobstore.ErrNotFound) {
		// What the upload holds now: its size, giving back what it was
		// granted and did not receive (also after a failed append, whose
		// received bytes are kept). The blob store released the upload
		// when Append returned, so a commit or an abort may already have
		// moved the row on: only a row still uploading is updated, and
		// none is created (the reservation made the row of every upload
		// that received bytes). Taking the upload's lock for this instead
		// would not do: the lock is this process's, and the row is shared
		// by every replica.
		ctx := context.WithoutCancel(ctx)
		if perr := s.Store.InTx(ctx, func(q Queries) error {
			_, err := q.SetUploadingBlobBytes(ctx, uploadID, size, s.Now())
			return err
		}); perr != nil && err == nil {
			err = perr
		}
	}
	return offset, size, err
}

// reserveUpload makes the upload's reservation at least need bytes (its
// size once the chunk in hand is written), and up to want when the quota
// has room, and returns the reservation.
//
// Bytes in progress are reserved before they are written rather than
// counted once received: counting afterwards lets several uploads each
// pass the check before any of them is counted, and together exceed the
// quota. The whole size cannot be reserved up front, as an upload does not
// declare it (chunks of any length until the commit). Every reservation
// takes the project's lock in the database, so uploads on every replica
// draw from the same room; what an append was granted beyond what it
// received is given back when it ends.
//
// The quota in force is read under the same lock, so a platform admin's
// change holds from the next reservation on, on every replica.
func (s *Service) reserveUpload(ctx context.Context, it ArtifactIntent, uploadID string, need, want int64) (int64, error) {
	var granted int64
	err := s.Store.InTx(ctx, func(q Queries) error {
		if err := q.LockProjectBlobUsage(ctx, it.ProjectID); err != nil {
			return err
		}
		limit, limited, err := s.blobQuota(ctx, q, it.ProjectID)
		if err != nil {
			return err
		}
		// Without a quota nothing is checked, but the reservation is still
		// recorded: the upload counts should a quota be set while it runs.
		granted = want
		if limited {
			used, err := q.ProjectBlobUsage(ctx, it.ProjectID, uploadID)
			if err != nil {
				return err
			}
			if used+need > limit {
				return &quotaError{err: errdefs.Unprocessable("blob_quota_exceeded",
					"project %s holds %d bytes of blob storage (registered blob artifacts, uploads committed but not registered, and uploads in progress) against its quota of %d bytes, so this upload cannot reach %d bytes; the upload was aborted. Register or abort the project's unfinished uploads, delete blob artifacts it no longer needs, or ask a platform admin to raise the project's blob quota (gpuaas project storage set --blob-quota; the platform's default is --project-blob-quota-bytes); committed uploads that are never registered are removed %s after their commit",
					it.ProjectID, used, limit, need, AbandonedUploadAge).WithDetails(map[string]any{"used_bytes": used, "quota_bytes": limit, "upload_bytes": need})}
			}
			granted = min(want, limit-used)
		}
		_, err = q.ReserveBlobUpload(ctx, s.blobUploadRow(it, uploadID, BlobUploading, granted, ""))
		return err
	})
	return granted, err
}

// blobUploadRow is the quota's row of an upload as of now.
func (s *Service) blobUploadRow(it ArtifactIntent, uploadID string, state BlobUploadState, bytes int64, digest string) BlobUpload {
	now := s.Now()
	return BlobUpload{UploadID: uploadID, ProjectID: it.ProjectID, IntentID: it.ID, SourceURI: it.SourceURI, State: state,
		Bytes: bytes, Digest: digest, CreatedAt: now, UpdatedAt: now}
}

// quotaError carries a refusal out of the blob store's append, which
// wraps what its reader returns.
type quotaError struct{ err error }

func (e *quotaError) Error() string { return e.err.Error() }
func (e *quotaError) Unwrap() error { return e.err }

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
	// The digest is recorded before the commit starts: from then on the
	// sweeper keeps content with this digest, which the commit may find
	// already stored and only reference.
	st, err := s.uploadState(ctx, it, uploadID)
	if err != nil {
		return Upload{}, err
	}
	if err := s.Store.InTx(ctx, func(q Queries) error {
		// A concurrent commit of the same upload may have committed it
		// already: its row is left as that commit wrote it.
		_, err := q.ReserveBlobUpload(ctx, s.blobUploadRow(it, uploadID, BlobUploading, st.Offset, digest))
		return err
	}); err != nil {
		return Upload{}, err
	}
	obj, err := s.Blobs.Commit(ctx, uploadID, digest)
	if errors.Is(err, blobstore.ErrDigestMismatch) {
		// The store deleted the upload: nothing of it is left to count.
		if derr := s.Store.InTx(ctx, func(q Queries) error { return q.DeleteBlobUpload(ctx, uploadID) }); derr != nil {
			s.Logger.WarnContext(ctx, "could not release a deleted upload's quota", "upload_id", uploadID, "err", derr)
		}
	}
	if err != nil {
		return Upload{}, err
	}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		// Committed and not registered: it counts against the quota at its
		// size until registered, and is swept if never registered.
		if err := tx.PutBlobUpload(ctx, s.blobUploadRow(it, uploadID, BlobCommitted, obj.Size, obj.Digest)); err != nil {
			return err
		}
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
		if err := tx.DeleteBlobUpload(ctx, uploadID); err != nil {
			return err
		}
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
