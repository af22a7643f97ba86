package events_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/gpuaas/gpuaas/internal/wakeup"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, servertest.LeakIgnores()...) }

// flakyBus acknowledges a prefix of each batch and then fails, while
// down is set: a bus that is partly or wholly unreachable.
type flakyBus struct {
	mu        sync.Mutex
	down      bool
	ackBefore int // while down, this many envelopes of a batch are acked first
	got       []events.Envelope
	calls     int
}

func (f *flakyBus) EnsureStream(context.Context) error { return nil }
func (f *flakyBus) Publish(_ context.Context, envs []events.Envelope) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	n := len(envs)
	if f.down {
		n = min(n, f.ackBefore)
	}
	f.got = append(f.got, envs[:n]...)
	if f.down {
		return n, errors.New("nats: no responders")
	}
	return n, nil
}

func (f *flakyBus) set(down bool, ackBefore int) {
	f.mu.Lock()
	f.down, f.ackBefore = down, ackBefore
	f.mu.Unlock()
}

func (f *flakyBus) received() []events.Envelope {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]events.Envelope(nil), f.got...)
}

func emitN(t *testing.T, db *store.DB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		err := db.Mutate(context.Background(), func(tx *store.Tx) error {
			if err := tx.Emit(store.Event{Type: "test.thing.happened", ProjectID: "p"}, nil); err != nil {
				return err
			}
			return tx.Audit(store.AuditEvent{Action: "test", ResourceType: "thing"}, nil, nil)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A bus outage never drops or reorders: the relay keeps sequencing (streams
// go on), publishes the acknowledged prefix, backs off, retries by itself
// and resumes at the first unacknowledged row.
func TestRelaySurvivesBusOutage(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		bus := &flakyBus{}
		hub := wakeup.New()
		r := &events.Relay{Log: store.EventLog(db), Bus: bus, Wake: hub, Holder: "r1", Interval: time.Hour, LeaseTTL: 10 * time.Second, Batch: 4}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer r.Stop()
		db.OnEventsCommitted(r.Kick)
		defer db.OnEventsCommitted(func() {})
		emitN(t, db, 3)
		waitFor(t, func() bool { return len(bus.received()) == 3 })

		bus.set(true, 2) // two more get through, then the bus fails
		wake := hub.Wait(wakeup.EventsSequenced)
		emitN(t, db, 7)
		<-wake // sequencing goes on while the bus is down
		waitFor(t, func() bool {
			rows, _ := db.Queries().ListEvents(ctx, events.EventFilter{}, 0, 100)
			return len(rows) == 10 && rows[9].Position == 10
		})
		waitFor(t, func() bool { bus.mu.Lock(); defer bus.mu.Unlock(); return bus.calls >= 3 }) // retried without a kick
		bus.set(false, 0)
		waitFor(t, func() bool {
			un, _ := db.Queries().UnpublishedEvents(ctx, 100)
			return len(un) == 0 && len(bus.received()) >= 10
		})
		seen := map[string]bool{}
		var last int64
		for _, e := range bus.received() {
			if seen[e.ID] {
				continue // a retried batch may resend what was acked after a failure: dedupe by id
			}
			seen[e.ID] = true
			if e.Sequence != last+1 {
				t.Fatalf("bus got sequence %d after %d", e.Sequence, last)
			}
			last = e.Sequence
		}
		if last != 10 {
			t.Fatalf("bus got up to %d, want 10", last)
		}
	})
}

// Only the lease holder publishes; a second relay takes over when the
// first stops (it releases the lease) and carries on where it left off.
func TestRelayHandover(t *testing.T) {
	db := storetest.Open(t, store.SQLite)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b1, b2 := &flakyBus{}, &flakyBus{}
	var led1, led2 atomic.Int32 // OnLead calls
	r1 := &events.Relay{Log: store.EventLog(db), Bus: b1, Wake: wakeup.New(), Holder: "r1", Interval: 20 * time.Millisecond, LeaseTTL: time.Minute,
		OnLead: []func(){func() { led1.Add(1) }}}
	r2 := &events.Relay{Log: store.EventLog(db), Bus: b2, Wake: wakeup.New(), Holder: "r2", Interval: 20 * time.Millisecond, LeaseTTL: time.Minute,
		OnLead: []func(){func() { led2.Add(1) }}}
	if err := r1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r1.WaitRuns(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := led1.Load(); n != 1 || !r1.Leader() {
		t.Fatalf("the first relay's first pass: leader %v, OnLead called %d times, want once", r1.Leader(), n)
	}
	if err := r2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r2.Stop()
	emitN(t, db, 5)
	waitFor(t, func() bool { return len(b1.received()) == 5 })
	if r2.Leader() || len(b2.received()) != 0 || led2.Load() != 0 {
		t.Fatalf("the second relay published (or was told it leads, %d) while the first held the lease", led2.Load())
	}
	if n := led1.Load(); n != 1 {
		t.Fatalf("OnLead called %d times while the first relay kept its lease, want once", n)
	}
	r1.Stop()
	emitN(t, db, 3)
	waitFor(t, func() bool { return r2.Leader() && len(b2.received()) >= 3 })
	if n := led2.Load(); n != 1 {
		t.Fatalf("the second relay took over: OnLead called %d times, want once", n)
	}
	for _, e := range b2.received() {
		if e.Sequence <= 5 && e.Sequence > 0 {
			continue // the new leader's republished tail; deduplicated by id on the bus
		}
		if e.Sequence < 6 || e.Sequence > 8 {
			t.Fatalf("second relay published sequence %d", e.Sequence)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The retention worker of the leader deletes published events past the
// retention, keeping the newest (the position counter) and anything the bus
// has not acknowledged.
func TestCleanerPrunesPublished(t *testing.T) {
	db := storetest.Open(t, store.SQLite)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bus := &flakyBus{}
	r := &events.Relay{Log: store.EventLog(db), Bus: bus, Wake: wakeup.New(), Holder: "r1", Interval: time.Hour, LeaseTTL: 10 * time.Second}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	emitN(t, db, 4)
	r.Kick()
	// The bus has them once Publish returned; the relay marks them
	// published just after, and only then may the cleaner prune them.
	waitFor(t, func() bool {
		left, err := store.EventLog(db).Read().UnpublishedEvents(ctx, 10)
		return err == nil && len(left) == 0 && len(bus.received()) == 4
	})
	c := &events.Cleaner{Log: store.EventLog(db), Relay: r, Retention: time.Nanosecond, Interval: time.Hour}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	// The first run is immediate. A run may find the relay between passes
	// or the database busy (CI saw one prune nothing, once): the next run
	// must then do it, so the test kicks runs until one has, or 20 s pass.
	var oldest, newest int64
	var err error
	for n := uint64(1); ; n++ {
		if err := c.WaitRuns(ctx, n); err != nil {
			t.Fatal(err)
		}
		oldest, newest, err = db.Queries().EventBounds(ctx)
		if err == nil && oldest == 4 || n == 400 {
			break
		}
		time.Sleep(50 * time.Millisecond)
		c.Kick()
	}
	if err != nil || oldest != 4 || newest != 4 {
		t.Fatalf("after pruning: oldest %d newest %d (%v), want only the newest left", oldest, newest, err)
	}
}
