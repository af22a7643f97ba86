package instances

import (
	"context"
	"errors"
	"time"

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

func (s *Service) newRetentionWorker() *worker.Periodic {
	return &worker.Periodic{Name: "instance-runtime-retention", Interval: RetentionInterval, Timeout: 5 * time.Minute, Logger: s.Logger,
		Run: func(ctx context.Context) error {
			if s.Leader != nil && !s.Leader() {
				return nil // the leader prunes; two would only repeat each other's deletes
			}
			_, err := s.PruneRuntimeEvents(ctx)
			return err
		}}
}

// PruneRuntimeEvents runs one retention pass on every replica that calls
// it (the worker calls it on the leader only); it returns how many rows it
// deleted. Each batch is its own transaction with its audit row.
func (s *Service) PruneRuntimeEvents(ctx context.Context) (int64, error) {
	keep := s.RuntimeEventRetention
	if keep <= 0 {
		return 0, nil
	}
	over, err := s.Store.Read().InstancesOverReportedCap(ctx, keep, retentionInstances)
	if err != nil || len(over) == 0 {
		return 0, err
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
	return total, errors.Join(errs...)
}
