package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// EventSource is the CloudEvents `source` of every event this platform emits.
const EventSource = storage.EventSource

// Event is storage's outbox envelope.
type Event = storage.Event

// Emit records an event to be written to the outbox in this transaction:
// the change, its audit row and its events commit together or not at all.
// data may be any JSON-marshalable value, raw JSON bytes, or nil.
func (t *Tx) Emit(e Event, data any) error {
	if e.Type == "" {
		return fmt.Errorf("store: event without a type")
	}
	switch v := data.(type) {
	case nil:
		e.Data = []byte("{}")
	case []byte:
		e.Data = v
	case json.RawMessage:
		e.Data = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("event data: %w", err)
		}
		e.Data = b
	}
	if len(e.Data) > t.maxData {
		// A bug of the emitter, refused here so it can never reach the
		// relay: the bus takes messages of 1 MiB at most.
		return fmt.Errorf("store: event %s data is %d bytes, over the %d-byte limit: emit smaller events", e.Type, len(e.Data), t.maxData)
	}
	t.events = append(t.events, e)
	return nil
}

func (t *Tx) flushEvents(ctx context.Context) error {
	actor := principal.From(ctx)
	now := t.now()
	for _, e := range t.events {
		e.ID = uuid.Must(uuid.NewV7()).String()
		if e.Source == "" {
			e.Source = EventSource
		}
		if e.Time.IsZero() {
			e.Time = now
		}
		e.Actor = string(actor.Type) + ":" + actor.ID
		e.CorrelationID = correlation.ID(ctx)
		if err := t.InsertEvent(ctx, e); err != nil {
			return fmt.Errorf("write outbox event: %w", err)
		}
	}
	return nil
}

const eventCols = `id, source, type, subject, occurred_at, org_id, project_id, actor, correlation_id, data`

// InsertEvent writes one outbox row. Use Tx.Emit from domains; this is the
// raw insert it ends in.
func (q *Queries) InsertEvent(ctx context.Context, e Event) error {
	return q.execHeld(ctx, `INSERT INTO outbox_events (`+eventCols+`, audience) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.ID, e.Source, e.Type, e.Subject, ts(e.Time), e.OrgID, e.ProjectID, e.Actor, e.CorrelationID, jsonText(e.Data), e.Audience)
}
