package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// One event the bus can never take (2 MB, over NATS's 1 MiB payload limit:
// what a 10,000-event usage post once became) no longer stalls the relay:
// it is parked with its reason, counted in /metrics and listed for
// operators, and the other tenant's events behind it are published.
func TestRelayParksWhatTheBusRefuses(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		ctx := context.Background()
		// What a 10,000-event usage post once emitted: one
		// billing.usage.recorded event with every record in it.
		usage := func(records int) map[string]any {
			recs := make([]map[string]any, records)
			for i := range recs {
				recs[i] = map[string]any{"usage_record_id": fmt.Sprintf("rec-%06d", i), "event_source": "//app/" + strings.Repeat("s", 100),
					"event_id": fmt.Sprintf("evt-%06d-%s", i, strings.Repeat("e", 60)), "quantity": 1,
					"start_time": "2026-11-25T00:00:00Z", "end_time": "2026-11-25T00:00:01Z"}
			}
			return map[string]any{"usage_source": "app_runtime", "usage_unit": "requests", "meter": "requests", "app_instance_id": "i",
				"app_slug": "a", "operating_mode": "tenant_dedicated", "control_plane_scope": "project", "runtime_backend": "launchable_oci",
				"records": recs}
		}
		emit := func(project string, data any) error {
			return s.DB.Mutate(ctx, func(tx *store.Tx) error {
				if err := tx.Emit(store.Event{Type: "billing.usage.recorded", OrgID: "org-" + project, ProjectID: project}, data); err != nil {
					return err
				}
				return tx.Audit(store.AuditEvent{Action: "test.emit", ResourceType: "thing"}, nil, nil)
			})
		}
		// Emit refuses such an event today; the row an older binary
		// left is written by lifting the bound for this one emit.
		if err := emit("tenant-a", usage(10000)); err == nil || !strings.Contains(err.Error(), "over the") {
			t.Fatalf("Emit took a 10,000-record event: %v", err)
		}
		s.DB.SetMaxEventDataBytes(8 << 20) // this test server's DB only
		err := emit("tenant-a", usage(10000))
		s.DB.SetMaxEventDataBytes(0)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := emit("tenant-b", usage(1)); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			// In the pipeline's order: a row is unsequenced, then
			// unpublished, then published (or parked).
			q := s.DB.Queries()
			pending, err := q.HasUnsequencedEvents(ctx)
			if err != nil {
				t.Fatal(err)
			}
			un, err := q.UnpublishedEvents(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(un) == 0 && !pending {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d events still unpublished behind the poison", len(un))
			}
			time.Sleep(20 * time.Millisecond) // the relay runs on its own; nothing to wait on from outside
		}
		admin := s.Admin()
		r := admin.Do("GET", "/api/v1/admin/events/parked", nil).Want(t, 200)
		items := r.Items()
		if len(items) != 1 || items[0]["reason"] != "payload_too_large" || items[0]["event"].(map[string]any)["projectid"] != "tenant-a" {
			t.Fatalf("parked: %d items", len(items))
		}
		if c, _ := r.JSON["counts"].(map[string]any); c["payload_too_large"] != float64(1) {
			t.Fatalf("counts: %s", r.Body)
		}
		resp, err := http.Get(s.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(m), `gpuaas_events_parked{reason="payload_too_large"} 1`) {
			t.Fatalf("/metrics lacks the parked count")
		}
		_, user := s.NewUser(admin, "not-an-operator@example.com")
		user.Do("GET", "/api/v1/admin/events/parked", nil).Want(t, 403)
	})
}
