// Package storage is the contract between the domains and the database: the
// transaction a mutation runs in (with the audit row and events it must
// leave), pagination, and the errors every query returns. It holds no
// domain's types. Each domain declares the queries it uses as its own
// interface over its own types; internal/store implements those interfaces
// for PostgreSQL and SQLite and imports the domains, never the other way
// round.
package storage

import (
	"context"
	"errors"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// Sentinels returned by every query, so domains can test them without
// knowing the engine.
var (
	ErrNotFound      = errdefs.ErrNotFound
	ErrAlreadyExists = errdefs.ErrAlreadyExists
	ErrConflict      = errdefs.ErrConflict
	ErrUnavailable   = errdefs.ErrUnavailable
	// ErrDeadlock: PostgreSQL broke a lock cycle by aborting this
	// transaction. Nothing it did is kept; running it again is safe.
	ErrDeadlock = errors.New("deadlock detected: the transaction was rolled back and may be retried")
)

// Dialect names a supported SQL engine. A domain asks only where the
// engines really differ in behaviour (PostgreSQL's row locks may make a
// caller wait where SQLite's one writer never does).
type Dialect string

const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// Tx is one open mutation as every domain sees it: besides the domain's own
// queries (the domain's Tx interface embeds this one), the audit rows and
// outbox events that commit with the change or not at all.
type Tx interface {
	// Audit records an audit row to be written in this transaction; actor,
	// correlation id, time and outcome come from the context. before and
	// after may be any JSON-marshalable value (or nil).
	Audit(e AuditEvent, before, after any) error
	// Emit records a CloudEvent for the outbox in this transaction. data is
	// any JSON-marshalable value, raw JSON bytes, or nil.
	Emit(e Event, data any) error
	// AfterCommit runs fn once the transaction has committed, never on
	// rollback: wake-ups of waiters for what the transaction wrote.
	AfterCommit(fn func())
}

// Store is what a domain holds of the database: T is the domain's view of a
// transaction (Tx plus its queries), Q its queries outside a mutation.
// internal/store implements it for every domain.
type Store[T Tx, Q any] interface {
	// Mutate runs fn in one transaction and writes the audit rows and
	// events fn recorded in that same transaction. A mutation that records
	// no audit row is refused: every privileged change leaves one.
	Mutate(ctx context.Context, fn func(tx T) error) error
	// Join gives this domain's view of a transaction another domain opened,
	// so one change can span domains and still commit once.
	Join(tx Tx) T
	// Read runs queries outside any transaction.
	Read() Q
	// InTx runs fn in one transaction that records no audit: reads that
	// must agree with each other, and bookkeeping that is not a change a
	// person made.
	InTx(ctx context.Context, fn func(q Q) error) error
	// RecordOutcome writes a standalone audit row for an attempt that
	// changed nothing: a denied privileged action, a refused credential.
	RecordOutcome(ctx context.Context, e AuditEvent, outcome string) error
}

// AuditEvent is one row of the audit log: who did what to which resource,
// with the state before and after, why, and under which correlation id.
type AuditEvent struct {
	ID            string
	OccurredAt    time.Time
	ActorType     string
	ActorID       string
	OrgID         string
	ProjectID     string
	Action        string // dot-named, e.g. "project.create"
	ResourceType  string
	ResourceID    string
	Before        []byte // JSON or nil
	After         []byte // JSON or nil
	Reason        string
	CorrelationID string
	Outcome       string // success | denied | failure
}

// AuditFilter narrows an audit listing; empty fields do not filter.
type AuditFilter struct {
	OrgID, ProjectID, ActorID, Action, ResourceType, ResourceID, CorrelationID, Outcome string
	Since, Until                                                                        time.Time
}

// EventSource is the CloudEvents `source` of every event this platform emits.
const EventSource = "/gpuaas"

// Event is one CloudEvents 1.0 envelope written to the outbox in the
// mutation's transaction. Emitters set Type, Subject, OrgID, ProjectID and
// Data; Mutate fills ID (the event_id), Source, Time, Actor and CorrelationID.
// Position is the order the relay gives events once they are visible to it.
type Event struct {
	ID            string
	Source        string
	Type          string // dot-named, e.g. "apps.instance.running"
	Subject       string // the resource, e.g. "app-instances/<id>"
	Time          time.Time
	OrgID         string
	ProjectID     string
	Actor         string // "<principal type>:<id>"
	CorrelationID string
	Data          []byte // JSON object
	Position      int64  // 0 until sequenced
	// Audience, when set, is the one project this event is about besides
	// its own scope's (an attachment of a shared instance to a tenant's
	// project). Readers of the event through an attachment see it only if
	// they are that project or its org; its own scope reads it as any
	// other. It is stored, not read back.
	Audience string
}

// MaxEventDataBytes bounds one event's data, far below NATS's default
// 1 MiB payload limit so the envelope around it fits too.
const MaxEventDataBytes = 256 << 10
