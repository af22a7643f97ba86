package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/audit"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// Audit retention runs on the replica that leads the event relay, and it
// runs as soon as the replica takes the lease, not an hour later: its run at
// start usually finds the lease not yet taken, and a replica that takes over
// from another must not wait a whole interval either. The test takes the
// lease away (the relay stops, as on a handover), leaves a row past the
// retention, and gives it back.
func TestAuditRetentionRunsWhenTheReplicaLeads(t *testing.T) {
	at := time.Now().UTC().Truncate(time.Second)
	clk := clock.NewManual(at)
	const retention = 24 * time.Hour
	s := servertest.Start(t, store.SQLite, servertest.WithClock(clk), func(c *config.Config) { c.AuditRetention = retention })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	relay, pruner := s.App.Relay(), s.App.AuditPruner()
	if err := pruner.WaitRuns(ctx, 1); err != nil {
		t.Fatal(err)
	}
	relay.Stop()

	q := s.App.DB.Queries()
	old := store.AuditEvent{ID: uuid.Must(uuid.NewV7()).String(), OccurredAt: at.Add(-retention - time.Hour), ActorType: "user", ActorID: "u1",
		Action: "project.update", ResourceType: "project", ResourceID: "p1", Outcome: "success"}
	if err := q.InsertAudit(ctx, old); err != nil {
		t.Fatal(err)
	}
	// A run while no replica leads deletes nothing.
	n := pruner.Runs()
	pruner.Kick()
	if err := pruner.WaitRuns(ctx, n+1); err != nil {
		t.Fatal(err)
	}
	if left, _, err := q.ListAudit(ctx, store.AuditFilter{ResourceID: "p1"}, store.Page{Limit: 10}); err != nil || len(left) != 1 {
		t.Fatalf("a replica that does not lead pruned: %d rows left (%v), want 1", len(left), err)
	}

	n = pruner.Runs()
	if err := relay.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pruner.WaitRuns(ctx, n+1); err != nil {
		t.Fatalf("the relay took the lease again and audit retention did not run: %v", err)
	}
	left, _, err := q.ListAudit(ctx, store.AuditFilter{ResourceID: "p1"}, store.Page{Limit: 10})
	if err != nil || len(left) != 0 {
		t.Fatalf("after the lease was taken again: %d rows past the retention left (%v), want none", len(left), err)
	}
	pruned, _, err := q.ListAudit(ctx, store.AuditFilter{Action: audit.PruneAction}, store.Page{Limit: 10})
	if err != nil || len(pruned) != 1 {
		t.Fatalf("%s rows: %d (%v), want 1", audit.PruneAction, len(pruned), err)
	}
}
