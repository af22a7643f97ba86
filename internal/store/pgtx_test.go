package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// PostgreSQL transactions run on pgx connections borrowed from the pool,
// with BEGIN sent along with their first statement. However one ends —
// committed, refused by the database at commit, failed by its caller
// half-way, or with nothing sent at all — its connection must go back
// with no transaction open (pgx's stdlib would close one that has: it must
// not have to), and the next one must work.
func TestPostgresTransactionsEndClean(t *testing.T) {
	// A database of its own: the session count below is the database's,
	// which other tests' schemas would move.
	db := storetest.OpenOwnDatabase(t)
	ctx := context.Background()
	audit := func(id string) store.AuditEvent {
		return store.AuditEvent{ID: id, OccurredAt: time.Now(), ActorType: "system", ActorID: "test", Action: "pgtx.test",
			ResourceType: "pgtx", ResourceID: "r", Outcome: "success"}
	}
	errCaller := errors.New("caller gave up")
	sessions0, err := store.SessionsForTest(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 { // more than the pool holds
		dup := newID()
		cases := []func(q *store.Queries) error{
			func(q *store.Queries) error { return nil }, // sends nothing
			func(q *store.Queries) error { // refused at commit
				_ = q.InsertAudit(ctx, audit(dup))
				return q.InsertAudit(ctx, audit(dup))
			},
			func(q *store.Queries) error { // fails half-way, after a read opened it
				if _, err := q.GetOrg(ctx, newID()); !errors.Is(err, store.ErrNotFound) {
					return err
				}
				return errCaller
			},
		}
		for j, fn := range cases {
			err := db.InTx(ctx, fn)
			switch {
			case j == 0 && err != nil, j == 1 && !errors.Is(err, store.ErrAlreadyExists), j == 2 && !errors.Is(err, errCaller):
				t.Fatalf("round %d, case %d: %v", i, j, err)
			}
		}
	}
	if n, err := store.IdleInTransactionForTest(ctx, db); err != nil || n != 0 {
		t.Fatalf("%d sessions left inside a transaction (%v)", n, err)
	}
	// 90 transactions, 60 of them failed: a pool that had to replace the
	// failed ones' connections would have opened a session for each.
	time.Sleep(600 * time.Millisecond) // pg_stat_database is updated by each backend about every 500 ms
	if sessions, err := store.SessionsForTest(ctx, db); err != nil || sessions-sessions0 > 20 {
		t.Fatalf("%d new sessions for 90 transactions on a pool of 20 (%v): failed transactions' connections were thrown away", sessions-sessions0, err)
	}
	// A panic is a bug: database/sql throws that connection away, and the
	// transaction must not outlive it.
	for range 3 {
		func() {
			defer func() { _ = recover() }()
			_ = db.InTx(ctx, func(q *store.Queries) error {
				_, _ = q.GetOrg(ctx, newID())
				panic("boom")
			})
		}()
	}
	if n, err := store.IdleInTransactionForTest(ctx, db); err != nil || n != 0 {
		t.Fatalf("%d sessions left inside a transaction after panics (%v)", n, err)
	}
	o := mkOrg(t, db, "after")
	if _, err := db.Queries().GetOrg(ctx, o.ID); err != nil {
		t.Fatalf("the pool does not work after failed transactions: %v", err)
	}
}
