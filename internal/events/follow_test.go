package events_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/gpuaas/gpuaas/internal/wakeup"
)

// memLog is a sequenced event log in memory: only what the reader reads.
// beforeList, when set, runs once before the next ListEvents.
type memLog struct {
	events.Queries // nil: the reader calls nothing else
	rows           []storage.Event
	beforeList     func()
}

func (l *memLog) EventBounds(context.Context) (int64, int64, error) {
	if len(l.rows) == 0 {
		return 0, 0, nil
	}
	return l.rows[0].Position, l.rows[len(l.rows)-1].Position, nil
}

func (l *memLog) Read() events.Queries { return l }
func (l *memLog) SequenceEvents(context.Context, string, string, time.Time, int) (int, int64, error) {
	return 0, 0, errors.New("memLog: read only")
}

func (l *memLog) ListEvents(_ context.Context, _ events.EventFilter, after int64, limit int) ([]storage.Event, error) {
	if f := l.beforeList; f != nil {
		l.beforeList = nil
		f()
	}
	var out []storage.Event
	for _, e := range l.rows {
		if e.Position > after && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

// newMemLog holds n events at positions 1…n, of type typ(position).
func newMemLog(n int, typ func(pos int64) string) *memLog {
	l := &memLog{}
	for i := int64(1); i <= int64(n); i++ {
		l.rows = append(l.rows, storage.Event{ID: "e" + strconv.FormatInt(i, 10), Type: typ(i), Position: i,
			Time: time.Unix(0, 0), OrgID: "o", ProjectID: "p"})
	}
	return l
}

// countingFraming records the positions it was given; onEvent runs after
// each.
type countingFraming struct {
	got     []int64
	ended   *events.Revoked
	onEvent func(pos int64)
}

func (f *countingFraming) Event(pos int64, _ string, _ []byte) error {
	f.got = append(f.got, pos)
	if f.onEvent != nil {
		f.onEvent(pos)
	}
	return nil
}
func (f *countingFraming) Flush() error                { return nil }
func (f *countingFraming) Idle() error                 { return nil }
func (f *countingFraming) End(r *events.Revoked) error { f.ended = r; return nil }

// follow runs Follow over log until it returns (or 5 s pass) with a reader
// whose access is gone once revoked is set.
func follow(t *testing.T, log events.Log, hub *wakeup.Hub, fr *countingFraming, revoked *atomic.Bool) error {
	t.Helper()
	return followWith(t, &events.Reader{Log: log, Wake: hub, KeepAlive: time.Hour, Poll: time.Hour, Reauthorize: time.Hour}, fr, revoked)
}

func followWith(t *testing.T, rd *events.Reader, fr *countingFraming, revoked *atomic.Bool) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rd.Follow(ctx, events.EventFilter{}, 0, fr, events.Access{Recheck: func(context.Context) error {
		if revoked.Load() {
			return &events.Revoked{Reason: events.ReasonAccessRevoked, Message: "gone"}
		}
		return nil
	}})
}

// A reader far behind (a resume from long ago) is re-checked when its
// access changes, as an idle one is: catching up batch after batch does
// not postpone the check until it has caught up with the head.
func TestFollowRechecksAccessWhileCatchingUp(t *testing.T) {
	hub := wakeup.New()
	var revoked atomic.Bool
	fr := &countingFraming{onEvent: func(pos int64) {
		if pos == 10 { // a role binding is removed while the stream catches up
			revoked.Store(true)
			hub.Notify(wakeup.AccessChanged)
		}
	}}
	err := follow(t, newMemLog(5000, func(int64) string { return "apps.thing.happened" }), hub, fr, &revoked)
	var r *events.Revoked
	if !errors.As(err, &r) || fr.ended == nil {
		t.Fatalf("Follow returned %v after %d events; want the stream ended as revoked", err, len(fr.got))
	}
	if len(fr.got) > 500 {
		t.Fatalf("%d events were sent after access was revoked at event 10; want at most the batch in flight", len(fr.got)-10)
	}
}

// An iam.* event that revokes the reader's access is the last event the
// reader gets: the events after it in the same batch are not sent before
// the re-check.
func TestFollowRechecksAccessRightAfterAnIAMEvent(t *testing.T) {
	var revoked atomic.Bool
	typ := func(pos int64) string {
		if pos == 10 {
			return "iam.role_binding.deleted"
		}
		return "apps.thing.happened"
	}
	fr := &countingFraming{onEvent: func(pos int64) {
		if pos == 10 {
			revoked.Store(true) // the binding this event reports was the reader's
		}
	}}
	err := follow(t, newMemLog(100, typ), wakeup.New(), fr, &revoked)
	var r *events.Revoked
	if !errors.As(err, &r) {
		t.Fatalf("Follow returned %v; want the stream ended as revoked", err)
	}
	if len(fr.got) != 10 || fr.got[9] != 10 {
		t.Fatalf("the reader got %d events (last %d); want the 10 up to and including the iam event", len(fr.got), fr.got[len(fr.got)-1])
	}
}

// A server that drains ends a stream that is catching up too (its reader
// resumes elsewhere), not only one that waits at the head.
func TestFollowEndsOnShutdownWhileCatchingUp(t *testing.T) {
	rd := &events.Reader{Log: newMemLog(5000, func(int64) string { return "apps.thing.happened" }), Wake: wakeup.New(),
		KeepAlive: time.Hour, Poll: time.Hour, Reauthorize: time.Hour}
	fr := &countingFraming{onEvent: func(pos int64) {
		if pos == 10 {
			rd.Shutdown()
		}
	}}
	if err := followWith(t, rd, fr, new(atomic.Bool)); err != nil {
		t.Fatalf("Follow returned %v", err)
	}
	if len(fr.got) > 500 {
		t.Fatalf("%d events were sent after the shutdown at event 10; want at most the batch in flight", len(fr.got)-10)
	}
}

// publishedLog is db's event log holding 600 sequenced events, those up to
// position 550 published an hour before now, the rest at now: a cleaner
// pruning at now minus a minute deletes positions 1…550.
func publishedLog(t *testing.T, db *store.DB) (events.Log, time.Time) {
	t.Helper()
	ctx := context.Background()
	emitN(t, db, 600)
	now := time.Now()
	q := db.Queries()
	if ok, err := q.AcquireLease(ctx, events.LeaseName, "test", now, time.Minute); err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	log := store.EventLog(db)
	if n, _, err := log.SequenceEvents(ctx, events.LeaseName, "test", now, 1000); err != nil || n != 600 {
		t.Fatalf("sequenced %d: %v", n, err)
	}
	if err := q.MarkPublished(ctx, 550, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := q.MarkPublished(ctx, 600, now); err != nil {
		t.Fatal(err)
	}
	return log, now
}

// A stream that falls behind retention while it reads — it resumed near
// the retention edge and the cleaner deleted the next events before it got
// to them — ends instead of skipping them silently: its reader resumes with
// its last id and is answered cursor_expired.
func TestFollowNeverSkipsEventsRetentionDeletedUnderIt(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		log, now := publishedLog(t, db)
		fr := &countingFraming{onEvent: func(pos int64) {
			if pos == 300 { // the cleaner runs while the stream reads its first batch
				if n, err := log.Read().PruneEvents(ctx, now.Add(-time.Minute)); err != nil || n != 550 {
					t.Errorf("pruned %d: %v", n, err)
				}
			}
		}}
		rd := &events.Reader{Log: log, Wake: wakeup.New(), KeepAlive: time.Hour, Poll: time.Hour, Reauthorize: time.Hour}
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err := rd.Follow(fctx, events.EventFilter{}, 1, fr, events.Access{})
		if !errors.Is(err, events.ErrStreamExpired) {
			t.Errorf("Follow returned %v; want ErrStreamExpired", err)
		}
		if last := fr.got[len(fr.got)-1]; len(fr.got) != 500 || last != 501 {
			t.Errorf("the stream sent %d events up to %d; want the 500 read before the cleaner ran (2…501), not 551… after a silent gap", len(fr.got), last)
		}
	})
}

// On a WebSocket, such a stream ends as a resume point past retention is
// refused at the upgrade: an error message naming the oldest retained
// event, then close 4410.
func TestWebSocketStreamPastRetentionClosesCursorExpired(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		log, now := publishedLog(t, db)
		if _, err := log.Read().PruneEvents(ctx, now.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
		rd := &events.Reader{Log: log, Wake: wakeup.New(), KeepAlive: time.Hour, Poll: time.Hour, Reauthorize: time.Hour}
		done := make(chan error, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				done <- err
				return
			}
			// Resumed at 1 while it was retained; 2…550 are gone by the first read.
			done <- rd.StreamWebSocket(r.Context(), c, events.EventFilter{}, 1, events.Access{})
		}))
		defer srv.Close()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(wctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		_, msg, err := c.Read(wctx)
		if err != nil || !strings.Contains(string(msg), `"code":"cursor_expired"`) || !strings.Contains(string(msg), `"oldest_sequence":551`) {
			t.Fatalf("first message %s (%v); want the cursor_expired error naming sequence 551", msg, err)
		}
		if _, _, err := c.Read(wctx); websocket.CloseStatus(err) != events.CloseCursorExpired {
			t.Fatalf("then %v; want close %d", err, events.CloseCursorExpired)
		}
		if err := <-done; !errors.Is(err, events.ErrStreamExpired) {
			t.Fatalf("StreamWebSocket returned %v", err)
		}
	})
}

// A page that continues a cursor is refused as past retention when the
// cleaner deletes the events after the cursor between the API's retention
// check and the read: the page never starts after a silent gap.
func TestListNeverSkipsEventsRetentionDeletedUnderIt(t *testing.T) {
	log := newMemLog(100, func(int64) string { return "apps.thing.happened" })
	rd := &events.Reader{Log: log}
	ctx := context.Background()
	if err := rd.CheckRetained(ctx, events.EventFilter{}, 10); err != nil {
		t.Fatal(err) // the cursor after 10 is retained when the request comes
	}
	log.beforeList = func() { log.rows = log.rows[50:] } // the cleaner deletes 1…50
	items, _, err := rd.List(ctx, events.EventFilter{}, 10, 20)
	if e, ok := errdefs.As(err); !ok || e.Code != "cursor_expired" {
		n := int64(0)
		if len(items) > 0 {
			n = items[0].Sequence
		}
		t.Fatalf("List after 10 returned %d events from sequence %d (%v); want cursor_expired", len(items), n, err)
	}
}
