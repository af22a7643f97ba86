package httpapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/nats-io/nats.go/jetstream"
)

// busIDs waits until the relay has published everything, then returns the
// Nats-Msg-Id of every message in the event stream (repeats included).
func busIDs(t *testing.T, s *servertest.Server) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		un, err := s.DB.Queries().UnpublishedEvents(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(un) == 0 {
			break
		}
		s.App.Relay().Kick()
		select {
		case <-ctx.Done():
			t.Fatal("the relay did not publish the outbox")
		case <-time.After(20 * time.Millisecond):
		}
	}
	js := s.App.EventBus().JS
	st, err := js.Stream(ctx, "GPUAAS_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
	}
	return ids
}

// After the bus lost its stream, an operator's republish restores every
// retained event with its id; a second republish inside the duplicate
// window adds nothing. Only platform admins may, and it is audited.
func TestRepublishEventsAfterTheBusLostThem(t *testing.T) {
	t.Parallel()
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		t.Parallel()
		s := servertest.Start(t, db.Dialect())
		admin := s.Admin()
		createSAs(t, admin, s.Creds.ProjectID, 3)
		s.SettleEvents()
		before := busIDs(t, s)
		oldest, newest, err := s.DB.Queries().EventBounds(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(before)) != newest-oldest+1 {
			t.Fatalf("bus has %d events, outbox %d", len(before), newest-oldest+1)
		}

		// The bus loses everything (a NATS server's storage gone).
		ctx := context.Background()
		if err := s.App.EventBus().JS.DeleteStream(ctx, "GPUAAS_EVENTS"); err != nil {
			t.Fatal(err)
		}
		uid, viewer := s.NewUser(admin, "republish-viewer@example.com")
		admin.Do("POST", "/api/v1/projects/"+s.Creds.ProjectID+"/members", map[string]string{"user_id": uid, "role": "project_admin"}).Want(t, 201)
		viewer.Do("POST", "/api/v1/admin/events/republish", map[string]string{"since": "1"}).Want(t, 403)
		admin.Do("POST", "/api/v1/admin/events/republish", map[string]string{"since": "yesterday"}).Want(t, 400)

		r := admin.Do("POST", "/api/v1/admin/events/republish", map[string]string{"since": fmt.Sprint(oldest), "reason": "bus lost its stream"}).Want(t, 202)
		if r.JSON["events"] != float64(len(before)) || r.JSON["from_sequence"] != float64(oldest) {
			t.Fatalf("republish: %s", r.Body)
		}
		after := busIDs(t, s)
		if fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("republished bus:\n%v\nwant\n%v", after, before)
		}
		// Again, by event id and by time: JetStream drops every repeat
		// inside its duplicate window.
		admin.Do("POST", "/api/v1/admin/events/republish", map[string]string{"since": before[0]}).Want(t, 202)
		admin.Do("POST", "/api/v1/admin/events/republish", map[string]string{"since": time.Now().Add(-time.Hour).Format(time.RFC3339)}).Want(t, 202)
		if again := busIDs(t, s); fmt.Sprint(again) != fmt.Sprint(before) {
			t.Fatalf("second republish added duplicates: %d messages, want %d", len(again), len(before))
		}

		// Past retention there is nothing to republish from: 410.
		if _, err := s.DB.Queries().PruneEvents(ctx, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if code := admin.Do("POST", "/api/v1/admin/events/republish", map[string]string{"since": fmt.Sprint(oldest)}).Want(t, 410).ErrorCode(); code != "cursor_expired" {
			t.Fatalf("expired republish: %s", code)
		}
	})
}
