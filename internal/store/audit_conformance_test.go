package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// The audit retention's storage, through the port it holds (store.Audit).
// Each dialect gets a database of its own: a prune sees the whole table.
func TestAuditPruneConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		q := store.Audit(db).Read()
		// Rows as the server writes them: ids minted in time order.
		add := func(d time.Duration) string {
			e := store.AuditEvent{ID: newID(), OccurredAt: at(d), ActorType: "user", ActorID: "u-prune",
				Action: "prune.test", ResourceType: "test", Outcome: "success"}
			noErr(t, "insert audit row", db.Queries().InsertAudit(ctx, e))
			return e.ID
		}
		var old, kept []string
		for i := range 5 {
			old = append(old, add(time.Duration(i-10)*time.Hour))
		}
		kept = append(kept, add(0)) // at the cutoff itself: not older, kept
		kept = append(kept, add(time.Hour), add(2*time.Hour))

		// Batches of 2: the five old rows take three statements (2, 2, 1),
		// the last of which also meets the first kept row and ends the pass.
		n, err := q.PruneAudit(ctx, t0, 2)
		noErr(t, "prune", err)
		if n != int64(len(old)) {
			t.Fatalf("pruned %d rows, want the %d older than the cutoff (batches of 2 must loop to completion)", n, len(old))
		}
		same(t, "rows left after the prune", auditIDsLeft(t, db), kept)

		// Nothing older is left: a second pass deletes nothing.
		n, err = q.PruneAudit(ctx, t0, 2)
		noErr(t, "second prune", err)
		same(t, "rows a second prune deleted", n, int64(0))

		// A batch of 0 takes the default size; the cutoff is exclusive.
		n, err = q.PruneAudit(ctx, at(time.Hour), 0)
		noErr(t, "prune with the default batch", err)
		same(t, "rows pruned with the default batch", n, int64(1))
		same(t, "rows left after the default batch", auditIDsLeft(t, db), kept[1:])

		// A cutoff the store cannot compare against is the caller's error.
		if _, err := q.PruneAudit(ctx, time.Time{}.Add(-time.Hour), 2); err == nil {
			t.Error("a cutoff before year 1 was accepted")
		}
	})
}

// The prune finds the head of the log by the primary key (no index on
// occurred_at, migration 0029) and looks its rows up by the primary key
// again: no statement reads the whole table. On PostgreSQL that means no
// join of the head with the table, which the planner serves with a
// sequential scan once the table is large (an empty test table cannot
// show the scan itself; the join is what leads to it).
func TestAuditPruneReadsThePrimaryKey(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		plan, err := store.QueryPlanForTest(ctx, db, store.PruneAuditQueryForTest(db.Dialect(), 10_000), t0.Format("2006-01-02T15:04:05.000000Z"))
		noErr(t, "plan", err)
		var want []string
		if db.Dialect() == store.Postgres {
			want = []string{"Index Cond: (id = ANY ("}
		} else {
			want = []string{
				"SEARCH audit_events USING INDEX sqlite_autoindex_audit_events_1 (id=?)",
				"SCAN audit_events USING COVERING INDEX sqlite_autoindex_audit_events_1",
			}
		}
		for _, w := range want {
			if !strings.Contains(plan, w) {
				t.Errorf("the prune's plan has no %q:\n%s", w, plan)
			}
		}
		for _, line := range strings.Split(plan, "\n") {
			line = strings.TrimSpace(line)
			if strings.Contains(line, "Seq Scan on audit_events") || strings.Contains(line, "Join") ||
				strings.HasPrefix(line, "SCAN audit_events") && !strings.Contains(line, "INDEX sqlite_autoindex_audit_events_1") {
				t.Errorf("the prune may read the whole table: %q\n%s", line, plan)
			}
		}
	})
}

// auditIDsLeft lists the ids of every audit row, oldest first.
func auditIDsLeft(t *testing.T, db *store.DB) []string {
	t.Helper()
	evs, _, err := db.Queries().ListAudit(context.Background(), store.AuditFilter{}, store.Page{Limit: store.MaxPageLimit})
	noErr(t, "list audit", err)
	ids := []string{}
	for _, e := range evs {
		ids = append(ids, e.ID)
	}
	slices.Reverse(ids)
	return ids
}
