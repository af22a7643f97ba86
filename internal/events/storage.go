package events

import (
	"context"
	"errors"
	"time"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// The event log is the outbox (storage.Event rows, written by every
// domain's mutations) as the relay, the retention worker and the reader use
// it. internal/store implements it.
//
// Ordering. Emitters never choose a position. The relay, holding the lease,
// gives every committed row that is still unsequenced the next positions
// (max + 1, …) in id order, in one transaction that first locks its lease
// row. A transaction still in flight is invisible to that pass, so when it
// commits later it gets a later position: positions are the order in which
// rows became visible, they are contiguous, and a client that resumes after
// position N can never miss a row that gets a position below N later.

// ErrLeaseLost is returned by SequenceEvents when holder no longer holds the
// relay lease (it expired and another replica took it over).
var ErrLeaseLost = errors.New("store: relay lease is held by another replica")

// EventFilter selects sequenced events. Empty fields match everything.
//
// A project's events (ProjectID) are the events recorded on the project,
// and the AttachedTypePrefix events of every shared instance attached to it
// (subject app-instances/<id>) while it is attached: all of that instance's
// retained apps.instance.* events, those from before the attachment too
// (the attached project's members read the same through the instance's
// timeline), in the one position order, and none once it is detached. No
// other event of the instance's home project reaches the attached one.
// An org's events (OrgID alone) are likewise its own, and those of the
// shared instances attached to any of its projects: a platform-managed
// instance's rows are of the platform's org, not of the tenant's.
type EventFilter struct {
	OrgID      string // the org's own events, and those of the shared instances attached to its projects
	ProjectID  string // the project's own events, and those of the shared instances attached to it
	TypePrefix string // "apps.artifact." or a whole type
	Subject    string
	Since      time.Time // occurred_at >= Since
	Until      time.Time // occurred_at < Until
}

// Check refuses a filter whose time bounds the store cannot compare
// against (storage.CheckTime), before anything is read or sent.
func (f EventFilter) Check() error {
	if !f.Since.IsZero() {
		if err := storage.CheckTime("since", f.Since); err != nil {
			return err
		}
	}
	if !f.Until.IsZero() {
		return storage.CheckTime("until", f.Until)
	}
	return nil
}

// AttachedTypePrefix is the type prefix of the events a project attached
// to a shared instance reads of it (the instance's lifecycle; not, say, the
// usage billed to the home project).
const AttachedTypePrefix = "apps.instance."

// ParkReason is why the bus refused an event for good (the relay parked
// it and went on).
type ParkReason string

const (
	ParkPayloadTooLarge ParkReason = "payload_too_large"
	ParkInvalidSubject  ParkReason = "invalid_subject"
)

// ParkedEvent is an event the bus refused, with the reason.
type ParkedEvent struct {
	storage.Event
	Reason   ParkReason
	ParkedAt time.Time
}

// Queries is what the event pipeline reads and writes of the event log,
// outside any transaction.
type Queries interface {
	// AcquireLease takes or renews the named lease for holder until
	// now+ttl. It reports whether holder holds it afterwards; an unexpired
	// lease of another holder is left alone.
	AcquireLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error)
	// ReleaseLease gives the lease up (a clean shutdown), so a successor
	// need not wait for it to expire.
	ReleaseLease(ctx context.Context, name, holder string) error

	// HasUnsequencedEvents reports whether committed rows wait for a
	// position.
	HasUnsequencedEvents(ctx context.Context) (bool, error)
	// UnpublishedEvents returns sequenced rows the bus has not
	// acknowledged, in position order.
	UnpublishedEvents(ctx context.Context, limit int) ([]storage.Event, error)
	// MarkPublished records the bus's acknowledgement of every row up to
	// and including position upTo.
	MarkPublished(ctx context.Context, upTo int64, at time.Time) error
	// UnmarkPublished makes rows acknowledged at or after since unpublished
	// again (a new leader's republished tail); it returns how many.
	UnmarkPublished(ctx context.Context, since time.Time) (int64, error)
	// ParkEvent marks the unpublished row at position as handled without
	// the bus, with the reason the bus refused it.
	ParkEvent(ctx context.Context, position int64, reason ParkReason, at time.Time) error
	ParkedLister
	// PruneEvents deletes rows the bus acknowledged before cutoff, keeping
	// the retained rows a suffix of the positions and always the newest.
	PruneEvents(ctx context.Context, cutoff time.Time) (int64, error)

	// ListEvents returns up to limit sequenced events after position
	// `after` that match f, in position order.
	ListEvents(ctx context.Context, f EventFilter, after int64, limit int) ([]storage.Event, error)
	// EventBounds returns the oldest and newest retained positions (0, 0
	// when nothing is sequenced yet).
	EventBounds(ctx context.Context) (oldest, newest int64, err error)
	// EventPosition returns the position of the sequenced event with id
	// (storage.ErrNotFound when unknown or not yet sequenced).
	EventPosition(ctx context.Context, id string) (int64, error)
}

// ParkedLister pages through parked events, oldest first: what ListParked
// needs.
type ParkedLister interface {
	ListParkedEvents(ctx context.Context, p storage.Page) ([]ParkedEvent, string, error)
}

// Log is the event log as the relay, the retention worker and the reader
// hold it.
type Log interface {
	// Read runs queries outside any transaction.
	Read() Queries
	// SequenceEvents gives up to limit visible unsequenced rows their
	// positions, in id order, in one transaction that locks the lease row,
	// if holder still holds the lease (ErrLeaseLost otherwise). It returns
	// how many rows it sequenced and the highest position now assigned.
	SequenceEvents(ctx context.Context, lease, holder string, now time.Time, limit int) (n int, head int64, err error)
}
