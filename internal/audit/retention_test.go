package audit_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/audit"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

var now = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

const retention = 30 * 24 * time.Hour

// seed writes audit rows as the server does (ids minted in time order):
// three older than the retention at now, two inside it.
func seed(t *testing.T, db *store.DB) (old, recent []string) {
	t.Helper()
	for _, age := range []time.Duration{40 * 24 * time.Hour, 35 * 24 * time.Hour, retention + time.Second, retention - time.Second, time.Hour} {
		e := storage.AuditEvent{ID: uuid.Must(uuid.NewV7()).String(), OccurredAt: now.Add(-age), ActorType: "user", ActorID: "u1",
			Action: "project.update", ResourceType: "project", ResourceID: "p1", Outcome: "success"}
		if err := db.Queries().InsertAudit(context.Background(), e); err != nil {
			t.Fatal(err)
		}
		if age > retention {
			old = append(old, e.ID)
		} else {
			recent = append(recent, e.ID)
		}
	}
	return old, recent
}

// runOnce starts p's worker on db, waits for its first run (at once) and
// stops it; it returns the audit rows left, oldest first.
func runOnce(t *testing.T, db *store.DB, p *audit.Pruner) []storage.AuditEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One clock for the pruner and the store, as the server wires them.
	clk := clock.NewManual(now)
	db.SetClock(clk.Now)
	p.Store, p.Now, p.Batch = store.Audit(db), clk.Now, 2
	w := p.Worker()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitRuns(ctx, 1); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	evs, _, err := db.Queries().ListAudit(ctx, storage.AuditFilter{}, storage.Page{Limit: storage.MaxPageLimit})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(evs)
	return evs
}

func ids(evs []storage.AuditEvent, action string) []string {
	out := []string{}
	for _, e := range evs {
		if e.Action == action {
			out = append(out, e.ID)
		}
	}
	return out
}

// With a retention, a run deletes the rows older than it, keeps the rest
// and leaves one audit.prune row saying how many went and up to when.
func TestPrunerDeletesRowsOlderThanTheRetention(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		_, recent := seed(t, db)
		left := runOnce(t, db, &audit.Pruner{Retention: retention})
		if got := ids(left, "project.update"); !slices.Equal(got, recent) {
			t.Fatalf("rows left %v, want only the ones inside the retention %v", got, recent)
		}
		prunes := slices.DeleteFunc(slices.Clone(left), func(e storage.AuditEvent) bool { return e.Action != audit.PruneAction })
		if len(prunes) != 1 {
			t.Fatalf("%d %s rows, want one for the pass", len(prunes), audit.PruneAction)
		}
		p := prunes[0]
		if p.ActorType != string(principal.System) || p.ActorID != principal.SystemActor.ID || p.Outcome != "success" ||
			p.ResourceType != "audit_event" || p.CorrelationID == "" || !p.OccurredAt.Equal(now) {
			t.Errorf("prune row %+v: want the platform acting, successfully, at the server's clock, under a correlation id", p)
		}
		var after struct {
			Deleted   int64  `json:"deleted"`
			Cutoff    string `json:"cutoff"`
			Retention string `json:"retention"`
		}
		if err := json.Unmarshal(p.After, &after); err != nil {
			t.Fatal(err)
		}
		if after.Deleted != 3 || after.Cutoff != now.Add(-retention).Format(time.RFC3339Nano) || after.Retention != "720h0m0s" {
			t.Errorf("prune row after %s, want 3 deleted before %s", p.After, now.Add(-retention).Format(time.RFC3339Nano))
		}
	})
}

// Retention 0 (the default) keeps every row, and so does a replica that is
// not the leader; neither writes a prune row.
func TestPrunerKeepsRowsWithoutRetentionOrLeadership(t *testing.T) {
	for _, tc := range []struct {
		name      string
		retention time.Duration
		leader    func() bool
	}{
		{"retention_0", 0, nil},
		{"not_leader", retention, func() bool { return false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
				old, recent := seed(t, db)
				left := runOnce(t, db, &audit.Pruner{Retention: tc.retention, Leader: tc.leader})
				if got, want := ids(left, "project.update"), append(old, recent...); !slices.Equal(got, want) {
					t.Errorf("rows left %v, want all of %v", got, want)
				}
				if n := len(ids(left, audit.PruneAction)); n != 0 {
					t.Errorf("%d %s rows, want none", n, audit.PruneAction)
				}
			})
		})
	}
}
