package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// The metering worker's reads (every minute, on every replica) go through
// indexes, not a scan of allocation_intervals or app_instance_events,
// which only grow.
func TestMeteringReadsUseIndexes(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		since := "2031-01-01T00:00:00.000000Z"
		for _, c := range []struct {
			name, query, index, table string
		}{
			{"allocation intervals", store.AllocationIntervalsSinceQueryForTest, "allocation_intervals_ended", "allocation_intervals"},
			{"instance status changes", store.InstanceStatusChangesQueryForTest, "app_instance_events_occurred", "app_instance_events"},
		} {
			plan, err := store.QueryPlanForTest(ctx, db, c.query, since)
			noErr(t, c.name+" plan", err)
			if !strings.Contains(plan, c.index) {
				t.Errorf("%s: the plan does not use %s:\n%s", c.name, c.index, plan)
			}
			for _, line := range strings.Split(plan, "\n") {
				line = strings.TrimSpace(line)
				if strings.HasPrefix(line, "SCAN "+c.table) || strings.HasPrefix(line, "SCAN e") || strings.Contains(line, "Seq Scan on "+c.table) {
					t.Errorf("%s: the plan scans %s: %q\n%s", c.name, c.table, line, plan)
				}
			}
		}
	})
}

// InstanceStatusChanges returns the whole timeline, oldest first, of every
// instance serving now or whose timeline changed at or after since, and
// nothing of the others.
func TestInstanceStatusChanges(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		s := store.Instances(db)
		o, p := tenant(t, db, "meter")
		serving := mkInstance(t, s, newInstance(o, p, "serving", "1", instances.StatusRunning))
		recent := mkInstance(t, s, newInstance(o, p, "recent", "1", instances.StatusDecommissioned))
		old := mkInstance(t, s, newInstance(o, p, "old", "1", instances.StatusDecommissioned))
		ev := func(i instances.AppInstance, status instances.InstanceStatus, d time.Duration) string {
			e := instances.InstanceEvent{ID: newID(), InstanceID: i.ID, ProjectID: p.ID, EventType: "t", Status: status,
				Payload: []byte(`{}`), OccurredAt: at(d)}
			noErr(t, "event", s.Read().InsertInstanceEvent(ctx, e))
			return e.ID
		}
		want := map[string][]string{
			serving.ID: {ev(serving, instances.StatusRunning, -48*time.Hour)},
			recent.ID:  {ev(recent, instances.StatusRunning, -48*time.Hour), ev(recent, instances.StatusDecommissioned, time.Hour)},
		}
		ev(old, instances.StatusRunning, -72*time.Hour)
		ev(old, instances.StatusDecommissioned, -48*time.Hour)
		// A workload's runtime event recorded while the instance deployed,
		// dated (by the workload) after the platform's running row: not a
		// status change, or it would close the running interval.
		reported := instances.InstanceEvent{ID: newID(), InstanceID: serving.ID, ProjectID: p.ID, EventType: "healthy", Status: instances.StatusDeploying,
			Payload: []byte(`{}`), OccurredAt: at(-47 * time.Hour), DedupeKey: "runtime:" + p.ID + ":s:" + newID()}
		_, err := s.Read().InsertReportedInstanceEvents(ctx, []instances.InstanceEvent{reported})
		noErr(t, "reported event", err)
		got, err := store.Billing(db).Read().InstanceStatusChanges(ctx, t0)
		noErr(t, "changes", err)
		seen := map[string][]string{}
		var last billing.InstanceStatusChange
		for i, c := range got {
			if i > 0 && c.InstanceID == last.InstanceID && c.At.Before(last.At) {
				t.Errorf("timeline of %s out of order: %v after %v", c.InstanceID, c.At, last.At)
			}
			seen[c.InstanceID] = append(seen[c.InstanceID], c.EventID)
			last = c
		}
		same(t, "timelines", seen, want)
	})
}
