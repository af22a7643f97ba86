package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// Held writes (PostgreSQL sends a transaction's trailing inserts in one
// round trip, just before its next statement or its commit) must behave
// exactly like statements sent one by one: later statements see them, and
// a failing one fails the transaction with its own error and writes
// nothing. SQLite executes them at once; the same assertions hold.
func TestHeldWrites(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		audit := func(id, resource string) store.AuditEvent {
			return store.AuditEvent{ID: id, OccurredAt: time.Now(), ActorType: "system", ActorID: "test", Action: "held.test",
				ResourceType: "held", ResourceID: resource, Outcome: "success"}
		}
		count := func(q *store.Queries, resource string) int {
			t.Helper()
			rows, _, err := q.ListAudit(ctx, store.AuditFilter{ResourceType: "held", ResourceID: resource}, store.Page{Limit: 10})
			if err != nil {
				t.Fatalf("list audit: %v", err)
			}
			return len(rows)
		}

		t.Run("later statements see them", func(t *testing.T) {
			err := db.InTx(ctx, func(q *store.Queries) error {
				for _, id := range []string{newID(), newID(), newID()} {
					if err := q.InsertAudit(ctx, audit(id, "seen")); err != nil {
						return err
					}
				}
				if n := count(q, "seen"); n != 3 {
					t.Errorf("inside the transaction: %d rows, want 3", n)
				}
				return q.InsertAudit(ctx, audit(newID(), "seen")) // sent with the commit
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := count(db.Queries(), "seen"); n != 4 {
				t.Fatalf("after commit: %d rows, want 4", n)
			}
		})

		t.Run("a failure at commit writes nothing", func(t *testing.T) {
			dup := newID()
			err := db.InTx(ctx, func(q *store.Queries) error {
				if err := q.InsertAudit(ctx, audit(newID(), "commit")); err != nil {
					return err
				}
				if err := q.InsertAudit(ctx, audit(dup, "commit")); err != nil {
					return err
				}
				return q.InsertAudit(ctx, audit(dup, "commit"))
			})
			if !errors.Is(err, store.ErrAlreadyExists) {
				t.Fatalf("duplicate id: got %v, want ErrAlreadyExists", err)
			}
			if n := count(db.Queries(), "commit"); n != 0 {
				t.Fatalf("%d rows of a failed transaction were written", n)
			}
		})

		t.Run("a failure before a read is the error returned", func(t *testing.T) {
			dup := newID()
			read := false
			err := db.InTx(ctx, func(q *store.Queries) error {
				if err := q.InsertAudit(ctx, audit(dup, "read")); err != nil {
					return err
				}
				if err := q.InsertAudit(ctx, audit(dup, "read")); err != nil {
					return err // SQLite: at once
				}
				read = true
				_, err := q.GetOrg(ctx, newID()) // one-row read: the held inserts go first
				if err == nil {
					t.Error("the read after a failed insert succeeded")
				}
				return err
			})
			if db.Dialect() == store.Postgres && !read {
				t.Error("PostgreSQL sent a held insert before the next statement")
			}
			if !errors.Is(err, store.ErrAlreadyExists) {
				t.Fatalf("transaction error: got %v, want the insert's ErrAlreadyExists", err)
			}
			if n := count(db.Queries(), "read"); n != 0 {
				t.Fatalf("%d rows of a failed transaction were written", n)
			}
		})
	})
}

// A mutation may emit far more rows than one statement can carry: they go
// in several statements, all of them written.
func TestHeldWritesMany(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		const rows = 700 // 9,800 arguments: many statements
		err := db.InTx(ctx, func(q *store.Queries) error {
			for range rows {
				if err := q.InsertAudit(ctx, store.AuditEvent{ID: newID(), OccurredAt: time.Now(), ActorType: "system", ActorID: "test",
					Action: "held.test", ResourceType: "held", ResourceID: "many", Outcome: "success"}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		page := store.Page{Limit: 500}
		for {
			evs, next, err := db.Queries().ListAudit(ctx, store.AuditFilter{ResourceType: "held", ResourceID: "many"}, page)
			if err != nil {
				t.Fatal(err)
			}
			got += len(evs)
			if next == "" {
				break
			}
			page.Cursor = next
		}
		if got != rows {
			t.Fatalf("%d audit rows written, want %d", got, rows)
		}
	})
}
