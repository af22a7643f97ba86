package artifacts

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// The registry's UploadQuota: every byte pushed into a project's
// repositories is held against the project's quota before the registry
// stores it, in the database, so the count survives restarts and every
// replica sees the others' pushes. A project's holds are taken one at a
// time (LockRegistryQuota): used = committed distinct blobs + holds of
// writes in progress, and a hold is granted only while used stays within
// the quota.

var _ registry.UploadQuota = registryAuthz{}

// HoldUpload implements registry.UploadQuota.
func (a registryAuthz) HoldUpload(ctx context.Context, repository, upload string, need, want int64) (int64, error) {
	var got int64
	err := a.s.Store.InTx(ctx, func(q Queries) error {
		h, ok, err := a.lockHold(ctx, q, repository, upload)
		if err != nil || !ok {
			got = want // a repository no intent leads to is no project's
			return err
		}
		if limit := a.s.MaxRegistryBlob; limit > 0 {
			if h.SizeBytes+need > limit {
				return sizeRefusal(repository, h.SizeBytes+need, limit)
			}
			want = min(want, limit-h.SizeBytes)
		}
		room, err := a.room(ctx, q, h.ProjectID, need, "this upload")
		if err != nil {
			return err
		}
		// Holding ahead saves a transaction per read, but near the quota
		// it would take room a concurrent push needs: there, hold only
		// what has arrived.
		got = need
		if room >= 4*want {
			got = want
		}
		h.SizeBytes += got
		h.UpdatedAt = a.s.Now()
		return q.PutRegistryHold(ctx, h)
	})
	return got, err
}

// HoldBlobs implements registry.UploadQuota. A blob the project counts
// costs nothing and is marked used now, under the lock a recount takes:
// the recount then keeps it for RegistryHoldIdle, longer than the request
// that references it can take to store its manifest.
func (a registryAuthz) HoldBlobs(ctx context.Context, repository, hold string, blobs []registry.BlobRef) error {
	return a.s.Store.InTx(ctx, func(q Queries) error {
		h, ok, err := a.lockHold(ctx, q, repository, hold)
		if err != nil || !ok {
			return err
		}
		now := a.s.Now()
		var need int64
		var uncounted []string
		for _, b := range blobs {
			if _, have, err := q.RegistryBlobSize(ctx, h.ProjectID, b.Digest); err != nil {
				return err
			} else if have {
				if err := q.TouchRegistryBlob(ctx, h.ProjectID, b.Digest, now); err != nil {
					return err
				}
				continue
			}
			if limit := a.s.MaxRegistryBlob; limit > 0 && b.Size > limit {
				return sizeRefusal(repository, b.Size, limit)
			}
			if !slices.Contains(uncounted, b.Digest) {
				need += b.Size
				uncounted = append(uncounted, b.Digest)
			}
		}
		if len(uncounted) == 0 {
			return nil
		}
		what := "blob " + blobs[0].Digest
		if len(blobs) > 1 {
			// A manifest: what it references may be stored already, no
			// longer counted since its last manifest was deleted.
			what = fmt.Sprintf("manifest %s (%d of its blobs, itself included, not counted: a blob stays stored after the last manifest "+
				"referencing it is deleted, and counts again once a manifest references it)", blobs[0].Digest, len(uncounted))
		}
		if _, err := a.room(ctx, q, h.ProjectID, need, what); err != nil {
			return err
		}
		h.SizeBytes = need
		h.UpdatedAt = now
		return q.PutRegistryHold(ctx, h)
	})
}

// UseCommitted implements registry.UploadQuota. A final PUT streams a
// blob the project counts for free, and its commit (InsertRegistryBlob)
// only marks it used again, without a quota check: were the blob given
// back meanwhile, the commit would count it again past the quota. So the
// read marks it used now, under the project's quota lock, in one
// transaction: a recount either ran wholly before (the blob is gone, the
// PUT pays for its bytes like any other) or keeps the blob, as it gives
// back only blobs last used before its start minus RegistryHoldIdle. That
// is airtight as long as the PUT commits within RegistryHoldIdle of now:
// the request's read deadline, --stream-timeout from its start (before
// this call), ends its body, and RegistryHoldIdle is at least
// --stream-timeout plus 10 minutes, a margin the registry's move of the
// finished upload into place (a rename in the embedded registry's
// filesystem storage) and the commit's one transaction stay far within
// (the bound a manifest put's HoldBlobs relies on too).
func (a registryAuthz) UseCommitted(ctx context.Context, repository, digest string) (int64, bool, error) {
	var size int64
	var ok bool
	err := a.s.Store.InTx(ctx, func(q Queries) error {
		pid, err := q.RepositoryProject(ctx, repository)
		if errors.Is(err, storage.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := q.LockRegistryQuota(ctx, pid); err != nil {
			return err
		}
		if size, ok, err = q.RegistryBlobSize(ctx, pid, digest); err != nil || !ok {
			return err
		}
		return q.TouchRegistryBlob(ctx, pid, digest, a.s.Now())
	})
	return size, ok, err
}

// ShrinkHold implements registry.UploadQuota.
func (a registryAuthz) ShrinkHold(ctx context.Context, hold string, n int64) error {
	return a.s.Store.InTx(ctx, func(q Queries) error { return q.ShrinkRegistryHold(ctx, hold, n) })
}

// CommitBlobs implements registry.UploadQuota: each blob joins the
// project (once, whichever repository or upload brought it) or, held
// already, is marked used now, and the hold goes, in one transaction.
func (a registryAuthz) CommitBlobs(ctx context.Context, repository, hold string, blobs []registry.BlobRef) error {
	return a.s.Store.InTx(ctx, func(q Queries) error {
		h, ok, err := a.lockHold(ctx, q, repository, hold)
		if err != nil || !ok {
			return err
		}
		now := a.s.Now()
		for _, b := range blobs {
			if err := q.InsertRegistryBlob(ctx, RegistryBlob{ProjectID: h.ProjectID, Digest: b.Digest, SizeBytes: b.Size,
				Repository: repository, CreatedAt: now, UsedAt: now}); err != nil {
				return err
			}
		}
		return q.DeleteRegistryHold(ctx, hold)
	})
}

// DropHold implements registry.UploadQuota.
func (a registryAuthz) DropHold(ctx context.Context, hold string) error {
	return a.s.Store.InTx(ctx, func(q Queries) error { return q.DeleteRegistryHold(ctx, hold) })
}

// TouchHold implements registry.UploadQuota, under the project's lock so
// that it comes wholly before or after the sweeper's release of the hold.
func (a registryAuthz) TouchHold(ctx context.Context, hold string) error {
	return a.s.Store.InTx(ctx, func(q Queries) error {
		h, err := q.GetRegistryHold(ctx, hold)
		if errors.Is(err, storage.ErrNotFound) {
			return nil // the upload's first bytes, or released
		}
		if err != nil {
			return err
		}
		if err := q.LockRegistryQuota(ctx, h.ProjectID); err != nil {
			return err
		}
		if h, err = q.GetRegistryHold(ctx, hold); errors.Is(err, storage.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		h.UpdatedAt = a.s.Now()
		return q.PutRegistryHold(ctx, h)
	})
}

// lockHold locks the quota of the project repository belongs to and reads
// hold (a new, empty one if none). ok is false for a repository no intent
// leads to.
func (a registryAuthz) lockHold(ctx context.Context, q Queries, repository, hold string) (RegistryHold, bool, error) {
	h, err := q.GetRegistryHold(ctx, hold)
	if errors.Is(err, storage.ErrNotFound) {
		now := a.s.Now()
		h = RegistryHold{ID: hold, Repository: repository, CreatedAt: now, UpdatedAt: now}
		h.ProjectID, err = q.RepositoryProject(ctx, repository)
		if errors.Is(err, storage.ErrNotFound) {
			return RegistryHold{}, false, nil
		}
	}
	if err != nil {
		return RegistryHold{}, false, err
	}
	if err := q.LockRegistryQuota(ctx, h.ProjectID); err != nil {
		return RegistryHold{}, false, err
	}
	// Read again under the lock: a hold changes only under it.
	if cur, err := q.GetRegistryHold(ctx, hold); err == nil {
		h = cur
	} else if !errors.Is(err, storage.ErrNotFound) {
		return RegistryHold{}, false, err
	}
	return h, true, nil
}

// room returns how many bytes the project may still hold, refusing when
// that is less than need. The quota row must be locked.
func (a registryAuthz) room(ctx context.Context, q Queries, projectID string, need int64, what string) (int64, error) {
	limit, limited, err := a.s.registryQuota(ctx, q, projectID)
	if err != nil {
		return 0, err
	}
	if !limited {
		return 1<<63 - 1, nil
	}
	committed, held, err := q.RegistryUsage(ctx, projectID)
	if err != nil {
		return 0, err
	}
	room := limit - committed - held
	if room < need {
		return 0, &registry.Refusal{Status: http.StatusForbidden, Code: "DENIED", Message: fmt.Sprintf(
			"registry quota exceeded: project %s uses %d of its %d bytes (%d stored, %d held by pushes in progress) and %s needs %d more; "+
				"push fewer or smaller layers, or ask a platform admin to raise the project's registry quota "+
				"(gpuaas project storage set --registry-quota; the platform's default is --project-registry-quota-bytes) "+
				"(delete images the project no longer needs, unregistered or of revoked or retired artifacts, with a publish intent's credentials, e.g. crane delete <repository>@<digest>: their blobs no other manifest of the project references are given back once none was pushed or referenced for %[8]s; "+
				"bytes held by a push that stopped are given back once it has been idle for %[8]s)",
			projectID, committed+held, limit, committed, held, what, need-max(room, 0), RegistryHoldIdle(a.s.RegistryStreamTimeout))}
	}
	return room, nil
}

func sizeRefusal(repository string, size, limit int64) error {
	return &registry.Refusal{Status: http.StatusBadRequest, Code: "SIZE_INVALID", Message: fmt.Sprintf(
		"blob too large: a push to %s reached %d bytes, past the registry's limit of %d bytes for one blob; "+
			"split the image into smaller layers, or ask the platform operator to raise --max-registry-blob-bytes",
		repository, size, limit)}
}
