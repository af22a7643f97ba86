package artifacts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// RegistryHoldIdle is how long a registry quota hold may go unwritten
// before the sweeper gives it back and removes its upload, for a server
// whose registry requests stream for at most streamTimeout
// (--stream-timeout). A new request reaches the registry only with a
// bearer token, a token is issued only for a publish intent's
// credentials, no intent lives past MaxIntentTTL and no token past
// --registry-token-ttl (at most registryTokenMaxTTL); a request that
// continues an upload writes its hold when it starts (TouchHold) and
// every 8 MiB after, and ends within streamTimeout. So a hold last written longer ago than the longer of the
// two belongs to a push that can never send another byte, however long
// its client paused between chunks. The margin covers clocks that
// disagree between replicas.
func RegistryHoldIdle(streamTimeout time.Duration) time.Duration {
	return max(MaxIntentTTL+registryTokenMaxTTL, streamTimeout) + 10*time.Minute
}

// registryTokenMaxTTL is the longest --registry-token-ttl the server
// accepts (config.Validate).
const registryTokenMaxTTL = time.Hour

// registryHoldSweepEvery is how often abandoned holds are looked for.
const registryHoldSweepEvery = 10 * time.Minute

// registryRecountEvery is how often each replica looks for projects due
// for a recount (a delete also kicks it at once), and registryRecountPass
// bounds one look: with each project's registryRecountTimeout, a pass
// starts at least two projects before it leaves the rest due.
const (
	registryRecountEvery = 10 * time.Minute
	registryRecountPass  = 5 * time.Minute
)

// RegistryHoldSweeper is the job that gives back the quota held by pushes
// into the embedded registry that will never finish: a client killed or
// cut off halfway through an upload, or a server that crashed in the
// middle of a request, leaves its hold behind, and nothing else ever
// drops it (the registry's own purge of old uploads does not know the
// quota, and a pusher's credentials cannot cancel an upload). Each hold
// idle past RegistryHoldIdle is released together with its upload's
// stored data, so a late continuation finds no upload (the registry
// answers BLOB_UPLOAD_UNKNOWN) and cannot commit bytes no longer counted.
// A manifest's or a mount's hold (left by a crash) has no upload data and
// is released by the same rule. What deleted images held is given back by
// RegistryRecounter, a job of its own.
func (s *Service) RegistryHoldSweeper() *worker.Periodic {
	return &worker.Periodic{Name: "registry-hold-sweeper", Interval: registryHoldSweepEvery, Timeout: 5 * time.Minute, Logger: s.Logger,
		Run: s.sweepRegistryHolds}
}

// RegistryRecounter is the job that gives back the registry quota of the
// blobs deleted images leave unreferenced (recountRegistries), kicked by
// each manifest delete. It is not the hold sweeper's: a pass of recounts
// may take its whole bound reading manifests from the registry's storage,
// and sharing a run would hold back the release of abandoned pushes for
// as long (and a slow hold sweep would eat into the recounts' time).
func (s *Service) RegistryRecounter() *worker.Periodic {
	s.registryRecount = &worker.Periodic{Name: "registry-recount", Interval: registryRecountEvery, Timeout: registryRecountPass, Logger: s.Logger,
		Run: s.recountRegistries}
	return s.registryRecount
}

// sweepRegistryHolds releases every hold idle past RegistryHoldIdle.
func (s *Service) sweepRegistryHolds(ctx context.Context) error {
	l := s.reg.Load()
	if l == nil {
		return nil // no registry yet, so nothing of this replica's to remove
	}
	idle := RegistryHoldIdle(s.RegistryStreamTimeout)
	cutoff := s.Now().Add(-idle)
	var released, bytes int64
	defer func() {
		if released > 0 {
			s.Logger.InfoContext(ctx, "abandoned registry pushes released from their projects' quota",
				"holds", released, "bytes", bytes, "idle_longer_than", idle)
		}
	}()
	for {
		stale, err := s.Store.Read().StaleRegistryHolds(ctx, cutoff, sweepBatch)
		if err != nil {
			return err
		}
		progress := false
		for _, h := range stale {
			n, ok, err := s.releaseRegistryHold(ctx, l, h, cutoff)
			if err != nil {
				return err
			}
			if ok {
				released, bytes, progress = released+1, bytes+n, true
			}
		}
		// A batch that released nothing was written to meanwhile, and
		// the next read would return the same rows.
		if len(stale) < sweepBatch || !progress {
			return nil
		}
	}
}

var errHoldSkipped = errors.New("registry hold no longer idle")

// releaseRegistryHold removes the upload of h and drops h, under the
// project's quota lock (the one every hold takes), unless it was written
// to since it was read: a live push's next hold waits for the release and
// then finds no upload to write into, and no count goes below what is
// stored. Removing the data first, inside the transaction, errs on the
// side of the quota: should the commit fail, the hold stays (counting
// bytes no longer stored) and the next sweep drops it.
func (s *Service) releaseRegistryHold(ctx context.Context, l *registryLink, h RegistryHold, cutoff time.Time) (int64, bool, error) {
	var size int64
	err := s.Store.InTx(ctx, func(q Queries) error {
		if err := q.LockRegistryQuota(ctx, h.ProjectID); err != nil {
			return err
		}
		cur, err := q.GetRegistryHold(ctx, h.ID)
		if errors.Is(err, storage.ErrNotFound) || err == nil && !cur.UpdatedAt.Before(cutoff) {
			return errHoldSkipped // committed, dropped or written to since
		}
		if err != nil {
			return err
		}
		if err := l.reg.RemoveUpload(ctx, cur.Repository, cur.ID); err != nil {
			return err
		}
		size = cur.SizeBytes
		return q.DeleteRegistryHold(ctx, cur.ID)
	})
	if errors.Is(err, errHoldSkipped) {
		return 0, false, nil
	}
	return size, err == nil, err
}

// registryRecountManifests bounds the manifests one project's recount
// reads: past it, nothing of the project is given back (logged), as the
// recount cannot tell what its manifests reference.
const registryRecountManifests = 10_000

// recountRegistries gives back the registry quota of the blobs no manifest
// references any more, for each project a manifest was deleted from (or
// whose recount was put off, below). There is no garbage collection: the
// blobs stay stored, and a manifest put that references one again counts
// it again (registry.UploadQuota.HoldBlobs), so nothing stored and
// referenced escapes the quota.
func (s *Service) recountRegistries(ctx context.Context) error {
	l := s.reg.Load()
	if l == nil {
		return nil
	}
	start := s.Now()
	due, err := s.Store.Read().DueRegistryRecounts(ctx, start, sweepBatch)
	if err != nil {
		return err
	}
	// One batch a pass: each project is cleared or put off past start, and
	// the rest wait for the next pass. A project is started only with its
	// whole bound left in the pass, so a project's deadline is always its
	// own, never the pass's; one that fails on its own is put off
	// (recountRegistry) and the next one goes on: the batch is read
	// longest due first, so a project left due would lead every pass.
	bound := l.recountTimeout
	if bound <= 0 {
		bound = registryRecountTimeout
	}
	var errs []error
	for _, pid := range due {
		if end, ok := ctx.Deadline(); ctx.Err() != nil || ok && time.Until(end) < bound {
			break // the pass's time is up: the rest stay due for the next
		}
		if err := s.recountRegistry(ctx, l, pid, start, bound); err != nil {
			errs = append(errs, fmt.Errorf("registry recount of project %s: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// registryRecountTimeout bounds one project's recount, which reads up to
// registryRecountManifests manifests from the registry's storage.
const registryRecountTimeout = 2 * time.Minute

// recountReadError marks a failure to read the registry's storage, as
// against the database's: the one a retry at the next pass would most
// likely meet again.
type recountReadError struct{ err error }

func (e *recountReadError) Error() string { return e.err.Error() }
func (e *recountReadError) Unwrap() error { return e.err }

// recountRegistry drops from projectID's count every blob that no
// manifest of its repositories references, read from the registry's
// storage after start, and that no push used within RegistryHoldIdle
// before start. The time bound is what makes the read before the lock
// safe: a manifest put marks each counted blob it references as used,
// under the lock, before the registry stores the manifest, and stores it
// within --stream-timeout, shorter than RegistryHoldIdle; so a blob last
// used before start-RegistryHoldIdle is referenced only by manifests
// stored before start, which the read saw. A blob kept for being recent
// is recounted once it no longer is.
func (s *Service) recountRegistry(ctx context.Context, l *registryLink, projectID string, start time.Time, bound time.Duration) error {
	idle := RegistryHoldIdle(s.RegistryStreamTimeout)
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err := s.recountRegistryWithin(rctx, l, projectID, start, idle)
	switch {
	case err == nil || ctx.Err() != nil:
		// Done, or cut short by the pass (the server stopping): it stays
		// due and leads the next pass.
		return err
	case rctx.Err() == nil && !errors.As(err, new(*recountReadError)):
		// The database's failure (a blip, a serialization failure): the
		// project stays due and is tried again at the next pass.
		return err
	}
	// The project's own failure, its storage unreadable or its recount
	// past its bound (a slow read would be as slow at the next pass): put
	// off on the pass's context, not the project's, which may be what
	// expired, so the next pass does not start with it again.
	s.Logger.WarnContext(ctx, "registry: a project's blobs could not be recounted after a manifest was deleted; its quota is not given back until it is retried",
		"project_id", projectID, "retry_at", start.Add(idle), "err", err)
	return s.Store.InTx(ctx, func(q Queries) error {
		if err := q.ClearRegistryRecount(ctx, projectID, start); err != nil {
			return err
		}
		return q.ScheduleRegistryRecount(ctx, projectID, start.Add(idle))
	})
}

// recountRegistryWithin is recountRegistry within ctx, the project's own
// bound.
func (s *Service) recountRegistryWithin(ctx context.Context, l *registryLink, projectID string, start time.Time, idle time.Duration) error {
	repos, err := s.Store.Read().RegistryRepositories(ctx, projectID)
	if err != nil {
		return err
	}
	refs, rerr := l.referencedBlobs(ctx, repos, registryRecountManifests)
	if rerr == nil && refs == nil {
		// A registry that keeps no quota (external): nothing to recount.
		return s.Store.InTx(ctx, func(q Queries) error { return q.ClearRegistryRecount(ctx, projectID, start) })
	}
	if errors.Is(rerr, registry.ErrTooManyManifests) {
		// Nothing is given back until the project's next delete: a retry
		// would find as many manifests.
		s.Logger.WarnContext(ctx, "registry: a project's blobs could not be recounted after a manifest was deleted; its quota is not given back",
			"project_id", projectID, "repositories", len(repos), "max_manifests", registryRecountManifests, "err", rerr)
		return s.Store.InTx(ctx, func(q Queries) error { return q.ClearRegistryRecount(ctx, projectID, start) })
	}
	if rerr != nil {
		return &recountReadError{err: rerr}
	}
	cutoff := start.Add(-idle)
	var freed, blobs int64
	err = s.Store.InTx(ctx, func(q Queries) error {
		freed, blobs = 0, 0
		if err := q.LockRegistryQuota(ctx, projectID); err != nil {
			return err
		}
		all, err := q.RegistryBlobs(ctx, projectID)
		if err != nil {
			return err
		}
		var next time.Time
		for _, b := range all {
			switch {
			case refs[b.Digest]:
			case !b.UsedAt.After(cutoff):
				if err := q.DeleteRegistryBlob(ctx, projectID, b.Digest); err != nil {
					return err
				}
				freed, blobs = freed+b.SizeBytes, blobs+1
			case next.IsZero() || b.UsedAt.Add(idle).Before(next):
				next = b.UsedAt.Add(idle) // after start: b.UsedAt is after cutoff
			}
		}
		if err := q.ClearRegistryRecount(ctx, projectID, start); err != nil {
			return err
		}
		if !next.IsZero() {
			return q.ScheduleRegistryRecount(ctx, projectID, next)
		}
		return nil
	})
	if err == nil && blobs > 0 {
		s.Logger.InfoContext(ctx, "registry quota given back: blobs no manifest references any more",
			"project_id", projectID, "blobs", blobs, "bytes", freed)
	}
	return err
}
