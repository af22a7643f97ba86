package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

func emitOne(t *testing.T, db *store.DB, typ, project string) {
	t.Helper()
	err := db.Mutate(context.Background(), func(tx *store.Tx) error {
		if err := tx.Emit(store.Event{Type: typ, ProjectID: project, Subject: "things/1"}, map[string]any{"n": 1}); err != nil {
			return err
		}
		return tx.Audit(store.AuditEvent{Action: "test.emit", ResourceType: "thing"}, nil, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEventLog(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		q := db.Queries()
		now := time.Now()
		if ok, err := q.AcquireLease(ctx, "r", "a", now, time.Minute); err != nil || !ok {
			t.Fatalf("first acquire: %v %v", ok, err)
		}
		if ok, err := q.AcquireLease(ctx, "r", "b", now, time.Minute); err != nil || ok {
			t.Fatalf("a held lease was taken over: %v %v", ok, err)
		}
		if _, _, err := db.SequenceEvents(ctx, "r", "b", now, 10); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("non-holder sequenced: %v", err)
		}
		// Expired: b takes over; a can no longer sequence.
		if ok, err := q.AcquireLease(ctx, "r", "b", now.Add(2*time.Minute), time.Minute); err != nil || !ok {
			t.Fatalf("takeover of an expired lease: %v %v", ok, err)
		}
		if _, _, err := db.SequenceEvents(ctx, "r", "a", now.Add(2*time.Minute), 10); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("old holder sequenced after takeover: %v", err)
		}
		later := now.Add(2 * time.Minute)
		for i := 0; i < 5; i++ {
			emitOne(t, db, "test.thing.happened", []string{"p1", "p2"}[i%2])
		}
		n, head, err := db.SequenceEvents(ctx, "r", "b", later, 3)
		if err != nil || n != 3 || head != 3 {
			t.Fatalf("sequence: n=%d head=%d err=%v", n, head, err)
		}
		if n, head, err = db.SequenceEvents(ctx, "r", "b", later, 3); err != nil || n != 2 || head != 5 {
			t.Fatalf("sequence rest: n=%d head=%d err=%v", n, head, err)
		}
		all, err := q.ListEvents(ctx, events.EventFilter{}, 0, 100)
		if err != nil || len(all) != 5 {
			t.Fatalf("list: %d %v", len(all), err)
		}
		for i, e := range all {
			if e.Position != int64(i+1) || (i > 0 && e.ID < all[i-1].ID) {
				t.Fatalf("row %d: position %d id %s (want contiguous positions in id order)", i, e.Position, e.ID)
			}
		}
		p1, _ := q.ListEvents(ctx, events.EventFilter{ProjectID: "p1", TypePrefix: "test.thing."}, 0, 100)
		if len(p1) != 3 {
			t.Fatalf("project filter: %d rows, want 3", len(p1))
		}
		if none, _ := q.ListEvents(ctx, events.EventFilter{TypePrefix: "test.other"}, 0, 100); len(none) != 0 {
			t.Fatalf("type prefix matched %d rows", len(none))
		}
		if pos, err := q.EventPosition(ctx, all[2].ID); err != nil || pos != 3 {
			t.Fatalf("event position: %d %v", pos, err)
		}
		// Publishing and retention: unpublished rows are never pruned, the
		// newest row always stays, and what remains is a suffix.
		un, _ := q.UnpublishedEvents(ctx, 100)
		if len(un) != 5 {
			t.Fatalf("unpublished: %d", len(un))
		}
		if err := q.MarkPublished(ctx, 4, later); err != nil {
			t.Fatal(err)
		}
		if un, _ = q.UnpublishedEvents(ctx, 100); len(un) != 1 || un[0].Position != 5 {
			t.Fatalf("unpublished after mark: %+v", un)
		}
		if n, err := q.PruneEvents(ctx, later.Add(time.Hour)); err != nil || n != 4 {
			t.Fatalf("prune: %d %v", n, err)
		}
		if oldest, newest, err := q.EventBounds(ctx); err != nil || oldest != 5 || newest != 5 {
			t.Fatalf("bounds after prune: %d %d %v", oldest, newest, err)
		}
		// The counter survives pruning: the next row gets 6.
		emitOne(t, db, "test.thing.happened", "p1")
		if _, head, err := db.SequenceEvents(ctx, "r", "b", later, 10); err != nil || head != 6 {
			t.Fatalf("sequence after prune: head %d %v", head, err)
		}
		if err := q.ReleaseLease(ctx, "r", "b"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := q.AcquireLease(ctx, "r", "a", later, time.Minute); !ok {
			t.Fatal("a released lease could not be taken")
		}
	})
}

// A transaction in flight while the relay sequences gets a later position
// when it commits, even though its id is older: a client resuming after the
// first position can never miss it. (PostgreSQL: SQLite serialises writers,
// so there a relay pass simply waits for the writer.)
func TestEventLogInFlightCommitsLater(t *testing.T) {
	db := storetest.Open(t, store.Postgres)
	ctx := context.Background()
	if ok, err := db.Queries().AcquireLease(ctx, "r", "a", time.Now(), time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	emitted, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- db.Mutate(ctx, func(tx *store.Tx) error {
			// Written directly so its id is minted now, before the fast one's.
			if err := tx.InsertEvent(ctx, store.Event{ID: newID(), Source: store.EventSource, Type: "test.slow.committed", Time: time.Now(), Data: []byte("{}")}); err != nil {
				return err
			}
			if err := tx.Audit(store.AuditEvent{Action: "test.slow", ResourceType: "thing"}, nil, nil); err != nil {
				return err
			}
			close(emitted)
			<-release
			return nil
		})
	}()
	<-emitted
	emitOne(t, db, "test.fast.committed", "")
	if _, head, err := db.SequenceEvents(ctx, "r", "a", time.Now(), 10); err != nil || head != 1 {
		t.Fatalf("first pass: head %d %v", head, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, head, err := db.SequenceEvents(ctx, "r", "a", time.Now(), 10); err != nil || head != 2 {
		t.Fatalf("second pass: head %d %v", head, err)
	}
	rows, _ := db.Queries().ListEvents(ctx, events.EventFilter{}, 1, 10)
	first, _ := db.Queries().ListEvents(ctx, events.EventFilter{}, 0, 1)
	if len(rows) != 1 || rows[0].Type != "test.slow.committed" || len(first) != 1 || rows[0].ID > first[0].ID {
		t.Fatalf("after position 1: %+v (first %+v); want the slow, older-id event", rows, first)
	}
}

// The store stamps the audit rows and outbox events it fills in by the
// clock the server set (DB.SetClock), not the wall clock.
func TestStoreStampsBySetClock(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
		db.SetClock(clock.NewManual(at).Now)
		defer db.SetClock(nil)
		emitOne(t, db, "test.thing.happened", "p1")
		if ok, err := db.Queries().AcquireLease(ctx, "r", "a", at, time.Minute); err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
		if _, _, err := db.SequenceEvents(ctx, "r", "a", at, 10); err != nil {
			t.Fatal(err)
		}
		evs, err := db.Queries().ListEvents(ctx, events.EventFilter{}, 0, 10)
		if err != nil || len(evs) != 1 || !evs[0].Time.Equal(at) {
			t.Fatalf("event: %+v %v, want its time %s", evs, err, at)
		}
		audits, _, err := db.Queries().ListAudit(ctx, store.AuditFilter{Action: "test.emit"}, store.Page{Limit: 10})
		if err != nil || len(audits) != 1 || !audits[0].OccurredAt.Equal(at) {
			t.Fatalf("audit: %+v %v, want occurred_at %s", audits, err, at)
		}
	})
}
