// Package audit is the audit log's own upkeep: the retention that deletes
// rows older than the operator's --audit-retention. The rows are written by
// every domain's mutation (storage.Tx.Audit) and read through the API
// (GET /api/v1/audit-events).
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// PruneAction is the action of the audit row each pass that deleted rows
// leaves behind.
const PruneAction = "audit.prune"

// Pruner deletes audit rows older than Retention, in batches; its Worker
// does so every Interval. With Retention 0 (the default) it deletes
// nothing: audit trails are often kept for compliance, so cutting them is
// the operator's choice.
type Pruner struct {
	Store     Store
	Retention time.Duration // 0: keep every row
	Interval  time.Duration // default 1h
	Batch     int           // rows per DELETE statement; default 10,000
	// Leader reports whether this replica should prune now (nil: always).
	// The server hands it the event relay's leadership, as it does the
	// outbox cleaner's, so replicas do not all run the same deletes. Two
	// prunes at once are still correct, only wasteful: each deletes only
	// rows older than its cutoff, one finding the other's rows gone ends
	// its pass, and the counts of their audit.prune rows add up.
	Leader func() bool
	Logger *slog.Logger
	// Now is the server's clock, against which Retention is cut (nil: the
	// wall clock); the rows' occurred_at is stamped with the same one.
	Now func() time.Time
}

// Worker is the job that prunes every Interval, the first time at once;
// its Kick and WaitRuns are the test hooks.
func (p *Pruner) Worker() *worker.Periodic {
	if p.Interval <= 0 {
		p.Interval = time.Hour
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	p.Now = clock.Or(p.Now)
	return &worker.Periodic{Name: "audit.retention", Interval: p.Interval, Logger: p.Logger, Run: p.run}
}

func (p *Pruner) run(ctx context.Context) error {
	if p.Retention <= 0 || (p.Leader != nil && !p.Leader()) {
		return nil
	}
	ctx = correlation.With(principal.With(ctx, principal.SystemActor), correlation.New())
	cutoff := p.Now().Add(-p.Retention).UTC()
	n, err := p.Store.Read().PruneAudit(ctx, cutoff, p.Batch)
	if n == 0 {
		return err
	}
	p.Logger.InfoContext(ctx, "audit rows older than the retention deleted", "count", n, "cutoff", cutoff,
		"retention", p.Retention, "correlation_id", correlation.ID(ctx))
	return errors.Join(err, p.record(ctx, n, cutoff, err))
}

// record leaves one audit row for a pass that deleted rows, so the trail
// itself shows that it was cut, when, and up to where: without it an
// auditor could not tell a pruned log from one whose early rows were
// removed by hand. One row per pass, never one per deleted row.
//
// It is written after the last batch, in a transaction of its own, and
// not with the last DELETE: the batches commit one by one by design (no
// pass holds a long lock), so no single transaction could cover the whole
// cut anyway, and only after the last one is the count known. A pass cut
// short (an error, the run's timeout) still records what it deleted, as a
// failure; a crash between the last batch and this row loses the summary
// of that pass only, not any row that should have stayed.
func (p *Pruner) record(ctx context.Context, deleted int64, cutoff time.Time, cause error) error {
	after, err := json.Marshal(struct {
		Deleted   int64  `json:"deleted"`
		Cutoff    string `json:"cutoff"`
		Retention string `json:"retention"`
	}{deleted, cutoff.Format(time.RFC3339Nano), p.Retention.String()})
	if err != nil {
		return err
	}
	outcome := "success"
	if cause != nil {
		outcome = "failure"
	}
	// The pass's own context may be what ended it (its timeout, a stop).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return p.Store.RecordOutcome(ctx, storage.AuditEvent{Action: PruneAction, ResourceType: "audit_event",
		Reason: "older than --audit-retention " + p.Retention.String(), After: after}, outcome)
}
