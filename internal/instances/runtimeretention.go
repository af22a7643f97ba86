package instances

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// Runtime-event retention: an instance keeps its newest
// RuntimeEventRetention timeline rows recorded from runtime events; older
// ones are deleted, oldest first. Those rows are also the records that
// recognise a repeated event (their dedupe key), so a repeat of an event
// whose row was deleted is recorded again: the window of duplicate
// detection is the rows kept. The platform's own rows (lifecycle, health
// changes, operations) carry no dedupe key and are never deleted here.
//
// A periodic worker, not a cap in the insert transaction: keeping the cap
// exact on every post would make each post count or walk the instance's
// rows under its lock, work that grows with the cap and lands on the
// workload's write path (the path a flood already loads). The worker does
// that work once a minute, off the request, in small transactions; between
// its runs the rate limit bounds how far past the cap an instance can get
// (rate × interval + burst).
const (
	// RetentionInterval is how often instances over the cap are looked for.
	RetentionInterval = time.Minute
	// retentionBatch bounds the rows one transaction deletes, so a prune
	// never holds the instance's rows (or SQLite's one writer) for long.
	retentionBatch = 5000
	// retentionInstances bounds the instances one pass looks at; the next
	// pass takes the rest.
	retentionInstances = 100
)

// errNothingPruned ends a prune transaction that deleted nothing: a
// mutation must leave an audit row, and there is nothing to say.
var errNothingPruned = errors.New("instances: nothing to prune")

// RetentionWorker deletes the oldest runtime-reported timeline rows of
// instances past RuntimeEventRetention.
func (s *Service) RetentionWorker() *worker.Periodic { return s.retention }

// newRetentionWorker prunes on the leader. After its first pass it looks
// only at instances that recorded a row since shortly before the last
// complete pass began: the others cannot have grown past the cap since,
// and counting every instance's rows every minute would grow with the
// whole timeline. Any start, and any loss of the lead, begins again with
// a pass over every instance.
func (s *Service) newRetentionWorker() *worker.Periodic {
	var since string // where the next pass looks from; "": everywhere
	return &worker.Periodic{Name: "instance-runtime-retention", Interval: RetentionInterval, Timeout: 5 * time.Minute, Logger: s.Logger,
		OnStart: func() { since = "" },
		Run: func(ctx context.Context) error {
			if s.Leader != nil && !s.Leader() {
				since = "" // the leader prunes; two would only repeat each other's deletes
				return nil
			}
			newest, err := s.Store.Read().NewestReportedEventID(ctx)
			if err != nil {
				return err
			}
			_, complete, err := s.pruneRuntimeEvents(ctx, since)
			if err == nil && complete {
				since = reportedSince(newest)
			}
			return err
		}}
}

// retentionOverlap is how far before the newest row of the last complete
// pass the next one looks: ids are UUIDv7, minted by the inserting
// replica's clock before its transaction commits, so a row committed just
// after that newest one may carry a slightly earlier id.
const retentionOverlap = 10 * time.Minute

// reportedSince returns the lowest UUIDv7 minted retentionOverlap before
// the one in newest, or "" (look everywhere) when newest is not one: the
// time of another version's id says nothing of when its row was written.
func reportedSince(newest string) string {
	id, err := uuid.Parse(newest)
	if err != nil || id.Version() != 7 {
		return ""
	}
	ms := uint64(time.Unix(id.Time().UnixTime()).UnixMilli())
	floor := ms - min(ms, uint64(retentionOverlap.Milliseconds()))
	return fmt.Sprintf("%08x-%04x-0000-0000-000000000000", floor>>16, floor&0xffff)
}

// PruneRuntimeEvents runs one retention pass over every instance on every
// replica that calls it (the worker calls it on the leader only); it
// returns how many rows it deleted. Each batch is its own transaction with
// its audit row.
func (s *Service) PruneRuntimeEvents(ctx context.Context) (int64, error) {
	n, _, err := s.pruneRuntimeEvents(ctx, "")
	return n, err
}

// pruneRuntimeEvents prunes the instances over the cap that recorded a row
// from since on, and reports whether it got to every one of them (a pass
// takes at most retentionInstances).
func (s *Service) pruneRuntimeEvents(ctx context.Context, since string) (deleted int64, complete bool, err error) {
	keep := s.RuntimeEventRetention
	if keep <= 0 {
		return 0, true, nil
	}
	over, err := s.Store.Read().InstancesOverReportedCap(ctx, keep, retentionInstances, since)
	if err != nil || len(over) == 0 {
		return 0, err == nil, err
	}
	ctx = correlation.With(principal.With(ctx, principal.SystemActor), correlation.New())
	var total int64
	var errs []error
	for _, id := range over {
		for {
			var n int64
			err := s.Store.Mutate(ctx, func(tx Tx) error {
				inst, err := tx.GetAppInstanceByID(ctx, id)
				if err != nil {
					return err
				}
				if n, err = tx.PruneReportedInstanceEvents(ctx, id, keep, retentionBatch); err != nil {
					return err
				}
				if n == 0 {
					return errNothingPruned // another pass got there first: nothing to audit
				}
				return tx.Audit(storage.AuditEvent{Action: "app_instance.runtime_events_pruned", ResourceType: "app_instance", ResourceID: id,
					OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: "past --runtime-event-retention"}, nil,
					map[string]int64{"deleted": n, "kept": int64(keep)})
			})
			if errors.Is(err, errNothingPruned) {
				n, err = 0, nil
			}
			total += n
			if err != nil {
				errs = append(errs, err)
			}
			if err != nil || n < retentionBatch {
				break
			}
		}
	}
	if total > 0 {
		s.Logger.InfoContext(ctx, "runtime-reported timeline rows past the retention deleted", "count", total, "instances", len(over),
			"keep", keep, "correlation_id", correlation.ID(ctx))
	}
	return total, len(over) < retentionInstances, errors.Join(errs...)
}
