package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/principal"
)

// Tx is a transaction opened by Mutate: the queries of every domain plus the
// audit record the mutation must leave and the outbox events it emits.
type Tx struct {
	*Queries
	now func() time.Time // the store's clock (DB.SetClock)
	// maxData bounds one emitted event's data (DB.SetMaxEventDataBytes).
	maxData int
	audits  []AuditEvent
	events  []Event
	after   []func()
}

// AfterCommit runs fn once the transaction has committed, never on
// rollback: wake-ups of in-process waiters for what the transaction wrote.
func (t *Tx) AfterCommit(fn func()) { t.after = append(t.after, fn) }

// Audit records an audit row to be written in this transaction. Actor
// (unless e names one), correlation id, time and outcome are filled from
// the context by Mutate.
// Before and After may be any JSON-marshalable value (or nil).
func (t *Tx) Audit(e AuditEvent, before, after any) error {
	var err error
	if e.Before, err = marshalState(before); err != nil {
		return err
	}
	if e.After, err = marshalState(after); err != nil {
		return err
	}
	t.audits = append(t.audits, e)
	return nil
}

func marshalState(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("audit state: %w", err)
	}
	return b, nil
}

// ErrNoAudit is returned when a mutation records no audit row: every
// privileged change must leave one, so forgetting is a bug, not a choice.
var ErrNoAudit = errors.New("store: mutation recorded no audit event")

// Mutate runs fn in one transaction and writes the audit rows and outbox
// events fn recorded in that same transaction: the change, its audit and its
// events commit together or not at all. This is the one path for every
// privileged mutation.
func (db *DB) Mutate(ctx context.Context, fn func(tx *Tx) error) error {
	var after []func()
	emitted := false
	err := db.InTx(ctx, func(q *Queries) error {
		tx := &Tx{Queries: q, now: db.now, maxData: db.eventDataLimit()}
		defer func() { after, emitted = tx.after, len(tx.events) > 0 }()
		if err := fn(tx); err != nil {
			return err
		}
		if len(tx.audits) == 0 {
			return ErrNoAudit
		}
		// A keyed request's commit is recorded with its change: a retry
		// after a crash between here and the answer never runs it again.
		if c, ok := idempotencyClaimFrom(ctx); ok {
			if err := q.commitIdempotencyClaim(ctx, c, db.now(), tx.audits[0].ResourceType, tx.audits[0].ResourceID); err != nil {
				return err
			}
		}
		if err := tx.flush(ctx, "success"); err != nil {
			return err
		}
		return tx.flushEvents(ctx)
	})
	if err == nil {
		for _, f := range after {
			f()
		}
	}
	if err == nil && emitted {
		if hooks := db.eventHooks.Load(); hooks != nil {
			for _, f := range *hooks {
				f()
			}
		}
	}
	return err
}

// OnEventsCommitted adds f to the functions called after every committed
// mutation that emitted events (the relay's wake-up, so an event reaches
// its consumers without waiting for the next poll). Every registration
// stays: a second one never replaces the first. f must not block.
func (db *DB) OnEventsCommitted(f func()) {
	for {
		old := db.eventHooks.Load()
		var next []func()
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, f)
		if db.eventHooks.CompareAndSwap(old, &next) {
			return
		}
	}
}

func (t *Tx) flush(ctx context.Context, outcome string) error {
	actor := principal.From(ctx)
	now := t.now()
	for _, e := range t.audits {
		e.ID = uuid.Must(uuid.NewV7()).String()
		if e.OccurredAt.IsZero() {
			e.OccurredAt = now
		}
		if e.ActorType == "" { // else the recorder names who acted (the platform's own follow-up)
			e.ActorType, e.ActorID = string(actor.Type), actor.ID
		}
		e.CorrelationID = correlation.ID(ctx)
		if e.Outcome == "" {
			e.Outcome = outcome
		}
		if err := t.InsertAudit(ctx, e); err != nil {
			return fmt.Errorf("write audit row: %w", err)
		}
	}
	return nil
}

// RecordOutcome writes a standalone audit row for an attempt that changed
// nothing — a denied privileged action or a refused credential exchange.
func (db *DB) RecordOutcome(ctx context.Context, e AuditEvent, outcome string) error {
	return db.InTx(ctx, func(q *Queries) error {
		tx := &Tx{Queries: q, now: db.now, maxData: db.eventDataLimit(), audits: []AuditEvent{e}}
		return tx.flush(ctx, outcome)
	})
}
