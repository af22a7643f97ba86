package artifacts

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/gpuaas/gpuaas/internal/blobstore"
	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// uploadSweepEvery is how often abandoned blob uploads are looked for.
const uploadSweepEvery = 10 * time.Minute

// AbandonedUploadAge is how long an upload may go without a byte before it
// is removed. Every blob upload belongs to a publish intent, no intent
// lives past MaxIntentTTL and an expired one takes no more bytes, so an
// upload idle for longer can never be finished.
const AbandonedUploadAge = MaxIntentTTL + 10*time.Minute

// sweepTimeout bounds one pass of the sweeper. Content another pass took
// that long ago without removing it is retried: that pass has ended (or
// its removal failed), so the retry races no removal in flight.
const sweepTimeout = 5 * time.Minute

// sweepBatch is how many stale rows one sweep reads at a time.
const sweepBatch = 100

// UploadSweeper is the job that removes abandoned blob uploads and their
// partial data, and committed content never registered: a client that
// begins a large upload and goes away, or uploads and commits without
// registering, again and again, would otherwise leave its bytes on the
// server's disk (and against its project's quota) for good. Nil when the
// server has no blob store.
func (s *Service) UploadSweeper() *worker.Periodic {
	if s.Blobs == nil {
		return nil
	}
	return &worker.Periodic{Name: "blob-upload-sweeper", Interval: uploadSweepEvery, Timeout: sweepTimeout, Logger: s.Logger,
		Run: func(ctx context.Context) error {
			n, err := s.Blobs.PurgeUploads(ctx, AbandonedUploadAge)
			if n > 0 {
				s.Logger.InfoContext(ctx, "abandoned blob uploads removed", "count", n, "idle_longer_than", AbandonedUploadAge)
			}
			if err != nil || s.Store == nil { // a blob store alone (tests of the purge)
				return err
			}
			return s.sweepBlobUploads(ctx)
		}}
}

// sweepBlobUploads forgets the reservations of uploads idle past
// AbandonedUploadAge (PurgeUploads removed their data) and removes content
// committed longer ago than that and never registered. A commit needs a
// live publish intent, and none lives past MaxIntentTTL, so content
// committed that long ago was committed by an intent that has expired.
func (s *Service) sweepBlobUploads(ctx context.Context) error {
	// The platform acts: its audit rows name the system, under one
	// correlation id per sweep.
	ctx = correlation.With(principal.With(ctx, principal.SystemActor), correlation.New())
	now := s.Now()
	cutoff := now.Add(-AbandonedUploadAge)
	removed := 0
	defer func() {
		if removed > 0 {
			s.Logger.InfoContext(ctx, "unregistered blob content removed", "count", removed, "committed_longer_ago_than", AbandonedUploadAge)
		}
	}()
	// Content an earlier pass took but could not remove, first (a batch a
	// pass): its row refuses registration already, and nothing else would
	// remove it. A removal that fails again is logged and retried on the
	// next pass; it does not hold up the rest of this one.
	pending, err := s.Store.Read().StaleBlobUploads(ctx, BlobSweeping, now.Add(-sweepTimeout), sweepBatch)
	if err != nil {
		return err
	}
	var failed error
	for _, u := range pending {
		if err := s.removeSwept(ctx, u); err != nil {
			s.Logger.WarnContext(ctx, "could not remove swept blob content; the next pass retries", "upload_id", u.UploadID, "err", err)
			failed = cmp.Or(failed, err)
			continue
		}
		removed++
	}
	for {
		idle, err := s.Store.Read().StaleBlobUploads(ctx, BlobUploading, cutoff, sweepBatch)
		if err != nil {
			return err
		}
		for _, u := range idle {
			if err := s.sweepIdle(ctx, u, cutoff); err != nil {
				return err
			}
		}
		if len(idle) < sweepBatch {
			break
		}
	}
	for {
		stale, err := s.Store.Read().StaleBlobUploads(ctx, BlobCommitted, cutoff, sweepBatch)
		if err != nil {
			return err
		}
		for _, u := range stale {
			ok, err := s.sweepCommitted(ctx, u.UploadID)
			if err != nil {
				return err
			}
			if ok {
				removed++
			}
		}
		if len(stale) < sweepBatch {
			break
		}
	}
	// A tombstone only refuses a late registration of what was swept, and
	// every intent alive at the sweep expires within MaxIntentTTL of it.
	if err := s.Store.InTx(ctx, func(q Queries) error {
		_, err := q.DeleteSweptBlobUploads(ctx, now.Add(-MaxIntentTTL))
		return err
	}); err != nil {
		return err
	}
	return failed
}

// sweepIdle forgets the reservation of an upload idle past cutoff
// (PurgeUploads removed its data). An idle row that carries a digest
// whose commit went through in the blob store (the commit's last step,
// recording it committed, failed) holds committed content: it becomes
// committed, and the committed pass sweeps it, instead of being dropped
// and leaving the content on disk uncounted for good.
func (s *Service) sweepIdle(ctx context.Context, u BlobUpload, cutoff time.Time) error {
	committed := false
	if u.Digest != "" {
		if key, err := blobstore.ParseURI(u.SourceURI); err == nil {
			obj, err := s.Blobs.Stat(ctx, key)
			if err != nil && !errors.Is(err, blobstore.ErrNotFound) {
				return err
			}
			committed = err == nil && obj.Digest == u.Digest
		}
	}
	return s.Store.InTx(ctx, func(q Queries) error {
		cur, err := q.GetBlobUpload(ctx, u.UploadID)
		if errors.Is(err, storage.ErrNotFound) || err == nil && (cur.State != BlobUploading || !cur.UpdatedAt.Before(cutoff) || cur.Digest != u.Digest) {
			return nil // committed, aborted or written to since
		}
		if err != nil {
			return err
		}
		if !committed {
			return q.DeleteBlobUpload(ctx, u.UploadID)
		}
		// Its updated_at stays: it was committed before the cutoff.
		cur.State = BlobCommitted
		return q.PutBlobUpload(ctx, cur)
	})
}

var errSweepSkipped = errors.New("upload no longer committed")

// sweepCommitted removes one committed upload's content unless a
// registered artifact references it (then only its row goes: the artifact
// counts it). The row is marked sweeping first, in a transaction that
// holds it, so a registration either claimed the row before (and the
// content is kept) or is refused after; a removal that fails is retried by
// a later pass. Blobs are shared by content, so the bytes stay while an
// artifact of any project, a platform release or another upload still
// names the digest; the reference stays while another upload of the same
// content at the same key does.
func (s *Service) sweepCommitted(ctx context.Context, uploadID string) (bool, error) {
	var (
		u     BlobUpload
		swept bool
	)
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		var err error
		u, err = tx.GetBlobUpload(ctx, uploadID)
		if errors.Is(err, storage.ErrNotFound) || err == nil && u.State != BlobCommitted {
			return errSweepSkipped // registered or swept meanwhile
		}
		if err != nil {
			return err
		}
		orgID := ""
		if it, err := tx.GetArtifactIntent(ctx, u.ProjectID, u.IntentID); err == nil {
			orgID = it.OrgID
		} else if !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		registered, err := tx.BlobSourceRegistered(ctx, u.ProjectID, u.SourceURI)
		if err != nil {
			return err
		}
		audit := storage.AuditEvent{Action: "artifact.upload.sweep", ResourceType: "artifact_upload", ResourceID: uploadID, OrgID: orgID, ProjectID: u.ProjectID}
		after := map[string]any{"intent_id": u.IntentID, "source_uri": u.SourceURI, "digest": u.Digest, "size": u.Bytes}
		if registered {
			// The same content committed again at a registered key.
			after["outcome"] = "registered"
			if err := tx.DeleteBlobUpload(ctx, uploadID); err != nil {
				return err
			}
			return tx.Audit(audit, nil, after)
		}
		// Taken, not yet removed: if the removal below fails, the next
		// pass finds the row still sweeping and retries it.
		u.State, u.UpdatedAt, swept = BlobSweeping, s.Now(), true
		if err := tx.PutBlobUpload(ctx, u); err != nil {
			return err
		}
		after["outcome"] = "removed"
		return tx.Audit(audit, nil, after)
	})
	if errors.Is(err, errSweepSkipped) || err == nil && !swept {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := s.removeSwept(ctx, u); err != nil {
		return false, err
	}
	return true, nil
}

// removeSwept removes the content of a row the sweeper took (sweeping) and
// then marks it swept. Both steps are safe to repeat: the removal keeps
// what anything else still names, and only a row still sweeping moves.
func (s *Service) removeSwept(ctx context.Context, u BlobUpload) error {
	uploadID := u.UploadID
	key, err := blobstore.ParseURI(u.SourceURI)
	if err != nil {
		return err
	}
	_, err = s.Blobs.RemoveObject(ctx, key, u.Digest, func(ctx context.Context) (blobstore.Keep, error) {
		var k blobstore.Keep
		q := s.Store.Read()
		var err error
		if k.Ref, err = q.OtherBlobUploadAt(ctx, u.SourceURI, u.Digest, uploadID); err != nil {
			return k, err
		}
		if !k.Ref {
			if k.Ref, err = q.BlobSourceRegistered(ctx, u.ProjectID, u.SourceURI); err != nil {
				return k, err
			}
		}
		k.Blob, err = q.BlobContentHeld(ctx, u.Digest, uploadID)
		return k, err
	})
	if err != nil {
		return err
	}
	return s.Store.InTx(ctx, func(q Queries) error {
		cur, err := q.GetBlobUpload(ctx, uploadID)
		if errors.Is(err, storage.ErrNotFound) || err == nil && cur.State != BlobSweeping {
			return nil
		}
		if err != nil {
			return err
		}
		cur.State, cur.UpdatedAt = BlobSwept, s.Now()
		return q.PutBlobUpload(ctx, cur)
	})
}
