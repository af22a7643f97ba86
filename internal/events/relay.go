package events

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/wakeup"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// LeaseName is the relay's lease row: one relay per database publishes.
const LeaseName = "events.relay"

// Publisher is what the relay publishes through (the NATS bus).
type Publisher interface {
	EnsureStream(ctx context.Context) error
	Publish(ctx context.Context, envs []Envelope) (int, error)
}

// Relay moves the outbox to its consumers. On every pass the replica that
// holds (or takes over) the lease sequences newly visible rows, wakes the
// streams, and publishes unacknowledged rows to the bus in position order,
// marking the acknowledged prefix. A crashed holder's successor resumes at
// the first unacknowledged row once the lease has expired; a row published
// twice across that handover carries the same Nats-Msg-Id and is dropped by
// JetStream's duplicate window.
type Relay struct {
	Log      Log
	Bus      Publisher     // nil: sequence only (streams still work)
	Wake     *wakeup.Hub   // wakes every replica's streams once rows are sequenced
	Holder   string        // this replica's unique name
	LeaseTTL time.Duration // default 10s
	Interval time.Duration // poll period when nobody kicks; default 1s
	Batch    int           // rows per transaction / publish; default 500
	// Republish is how far back a relay that becomes leader sends acked
	// rows again (keep it well inside the bus's duplicate window).
	Republish time.Duration
	Logger    *slog.Logger
	// Now is the server's clock: the lease, the sequencing and publishing
	// times it stamps and the republish cutoff (nil: the wall clock).
	Now func() time.Time
	// OnLead is called, in the relay's goroutine, each time this replica
	// takes the lease; set it before Start and keep each quick (a Kick).
	// The jobs only the leader runs (outbox and audit retention) kick
	// themselves with it: their first run at start usually comes before
	// the first lease, and their next one an interval (up to an hour)
	// later.
	OnLead []func()

	periodic worker.Periodic
	leader   atomic.Bool
	renewed  time.Time // last lease renewal, by Now (the periodic goroutine only)

	mu          sync.Mutex
	backoff     time.Duration
	nextPublish time.Time
	ensured     bool
}

// Start implements worker.Service.
func (r *Relay) Start(ctx context.Context) error {
	if r.LeaseTTL <= 0 {
		r.LeaseTTL = 10 * time.Second
	}
	if r.Interval <= 0 {
		r.Interval = time.Second
	}
	if r.Batch <= 0 {
		r.Batch = 500
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	r.Now = clock.Or(r.Now)
	r.periodic.Name, r.periodic.Interval, r.periodic.Timeout = "events.relay", r.Interval, r.LeaseTTL
	r.periodic.Run, r.periodic.Logger = r.pass, r.Logger
	return r.periodic.Start(ctx)
}

// Stop implements worker.Service; a leader gives its lease up so a
// successor need not wait for it to expire.
func (r *Relay) Stop() {
	r.periodic.Stop()
	if r.leader.Swap(false) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Log.Read().ReleaseLease(ctx, LeaseName, r.Holder); err != nil {
			r.Logger.Warn("release relay lease", "error", err)
		}
	}
}

// Kick asks for a pass now (a mutation committed events).
func (r *Relay) Kick() { r.periodic.Kick() }

// Leader reports whether this relay held the lease at its last pass.
func (r *Relay) Leader() bool { return r.leader.Load() }

// WaitRuns is the test hook: wait for n completed passes.
func (r *Relay) WaitRuns(ctx context.Context, n uint64) error { return r.periodic.WaitRuns(ctx, n) }

// Runs reports completed passes.
func (r *Relay) Runs() uint64 { return r.periodic.Runs() }

func (r *Relay) pass(ctx context.Context) error {
	// A leader renews its lease every quarter TTL, not every pass: each
	// commit kicks a pass, and sequencing checks the lease in its own
	// transaction anyway.
	// The lease's expiry is stamped by Now, so its renewal is judged by Now.
	ok := r.leader.Load() && r.Now().Sub(r.renewed) < r.LeaseTTL/4
	if !ok {
		now := r.Now()
		var err error
		if ok, err = r.Log.Read().AcquireLease(ctx, LeaseName, r.Holder, now, r.LeaseTTL); err != nil {
			return err
		}
		if ok {
			r.renewed = now
		}
	}
	if was := r.leader.Swap(ok); was != ok {
		r.Logger.InfoContext(ctx, "event relay lease", "leader", ok, "holder", r.Holder)
		if ok && r.Bus != nil && r.Republish > 0 {
			n, err := r.Log.Read().UnmarkPublished(ctx, r.Now().Add(-r.Republish))
			if err != nil {
				r.leader.Store(false) // try the takeover again next pass
				return err
			}
			r.Logger.InfoContext(ctx, "event relay took over; republishing the recent tail", "events", n)
		}
		if ok {
			for _, f := range r.OnLead {
				f()
			}
		}
	}
	if !ok {
		return nil
	}
	for {
		if pending, err := r.Log.Read().HasUnsequencedEvents(ctx); err != nil || !pending {
			if err != nil {
				return err
			}
			break
		}
		n, _, err := r.Log.SequenceEvents(ctx, LeaseName, r.Holder, r.Now(), r.Batch)
		if errors.Is(err, ErrLeaseLost) {
			r.leader.Store(false)
			return nil
		}
		if err != nil {
			return err
		}
		if n > 0 {
			r.Wake.Notify(wakeup.EventsSequenced)
		}
		if n < r.Batch {
			break
		}
	}
	if r.Bus == nil {
		return nil
	}
	return r.publish(ctx)
}

// publish sends unacknowledged rows in order; after a failure it backs off
// (250ms doubling to 5s) while sequencing and streams carry on.
func (r *Relay) publish(ctx context.Context) error {
	r.mu.Lock()
	wait := time.Until(r.nextPublish)
	r.mu.Unlock()
	if wait > 0 {
		return nil
	}
	err := r.publishAll(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.backoff, r.nextPublish = 0, time.Time{}
		return nil
	}
	r.ensured = false
	r.backoff = min(max(2*r.backoff, 250*time.Millisecond), 5*time.Second)
	r.nextPublish = time.Now().Add(r.backoff)
	// The next periodic pass may come later than the back-off; make sure a
	// retry is not left waiting for a new mutation.
	time.AfterFunc(r.backoff, r.Kick)
	return err
}

func (r *Relay) publishAll(ctx context.Context) error {
	if !r.ensured {
		if err := r.Bus.EnsureStream(ctx); err != nil {
			return err
		}
		r.ensured = true
	}
	q := r.Log.Read()
	for {
		rows, err := q.UnpublishedEvents(ctx, r.Batch)
		if err != nil || len(rows) == 0 {
			return err
		}
		envs := make([]Envelope, len(rows))
		for i, e := range rows {
			envs[i] = FromStore(e)
		}
		acked, perr := r.Bus.Publish(ctx, envs)
		if acked > 0 {
			if err := q.MarkPublished(ctx, rows[acked-1].Position, r.Now()); err != nil {
				return err
			}
		}
		var refused *RefusedError
		if errors.As(perr, &refused) && refused.Index < len(rows) {
			// One message the bus will never take must not hold up every
			// tenant's events behind it: park it, visibly, and go on.
			bad := rows[refused.Index]
			if err := q.ParkEvent(ctx, bad.Position, refused.Reason, r.Now()); err != nil {
				return err
			}
			r.Logger.ErrorContext(ctx, "event parked: the bus refuses it", "event_id", bad.ID, "type", bad.Type,
				"position", bad.Position, "reason", refused.Reason, "error", refused.Err)
			continue
		}
		if perr != nil {
			return perr
		}
		if len(rows) < r.Batch {
			return nil
		}
	}
}

// Cleaner deletes outbox rows older than the retention once the bus has
// acknowledged them. Only the relay leader runs it, so a big delete never
// competes with itself across replicas.
type Cleaner struct {
	Log       Log
	Relay     *Relay
	Retention time.Duration
	Interval  time.Duration // default 1m
	Logger    *slog.Logger
	// Now is the server's clock, against which Retention is cut (nil: the
	// wall clock); the relay stamps published_at with the same one.
	Now      func() time.Time
	periodic worker.Periodic
}

// Start implements worker.Service.
func (c *Cleaner) Start(ctx context.Context) error {
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	c.Now = clock.Or(c.Now)
	c.periodic.Name, c.periodic.Interval, c.periodic.Logger = "events.retention", c.Interval, c.Logger
	c.periodic.Run = c.run
	return c.periodic.Start(ctx)
}

// Stop implements worker.Service.
func (c *Cleaner) Stop() { c.periodic.Stop() }

// WaitRuns is the test hook.
func (c *Cleaner) WaitRuns(ctx context.Context, n uint64) error { return c.periodic.WaitRuns(ctx, n) }

// Runs reports completed runs.
func (c *Cleaner) Runs() uint64 { return c.periodic.Runs() }

// Kick asks for a run now.
func (c *Cleaner) Kick() { c.periodic.Kick() }

func (c *Cleaner) run(ctx context.Context) error {
	if c.Retention <= 0 || (c.Relay != nil && !c.Relay.Leader()) {
		return nil
	}
	_, err := c.Log.Read().PruneEvents(ctx, c.Now().Add(-c.Retention))
	return err
}

// Parked is an event the bus refused for good: the relay marked it handled
// with the reason and went on (docs/events.md).
type Parked struct {
	Event    Envelope   `json:"event"`
	Reason   ParkReason `json:"reason"`
	ParkedAt time.Time  `json:"parked_at"`
}

// ListParked pages through the parked events, oldest first.
func ListParked(ctx context.Context, q ParkedLister, p storage.Page) ([]Parked, string, error) {
	rows, next, err := q.ListParkedEvents(ctx, p)
	if err != nil {
		return nil, "", err
	}
	out := make([]Parked, len(rows))
	for i, r := range rows {
		out[i] = Parked{Event: FromStore(r.Event), Reason: r.Reason, ParkedAt: r.ParkedAt}
	}
	return out, next, nil
}
