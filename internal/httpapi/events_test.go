package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/nats-io/nats.go/jetstream"
)

// collect streams events until n arrived or the deadline passes.
func collect(t *testing.T, c *client.Client, projectID, last string, n int) []client.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []client.Event
	errDone := errors.New("done")
	err := c.StreamEvents(ctx, projectID, last, func(e client.Event) error {
		got = append(got, e)
		if len(got) == n {
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatalf("stream: got %d of %d events: %v", len(got), n, err)
	}
	return got
}

func createSAs(t *testing.T, c *servertest.Client, projectID string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		c.Do("POST", "/api/v1/projects/"+projectID+"/service-accounts",
			map[string]any{"name": "bot", "slug": "bot-" + uuid.NewString()[:8]}).Want(t, http.StatusCreated)
	}
}

// Events of a project reach its SSE stream and list in commit order, resume
// exactly after any id, stay inside their tenant, and reach JetStream once
// per id; a resume point past retention is 410, never a silent skip.
func TestProjectEvents(t *testing.T) {
	t.Parallel()
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		t.Parallel()
		f := newTenancy(t, db.Dialect())
		s := f.s
		adminTok := f.admin.Token
		api := client.New(s.URL, adminTok)
		createSAs(t, f.admin, f.projA, 3)
		createSAs(t, f.admin, f.projB, 2)

		got := collect(t, api, f.projA, "", 3)
		for i, e := range got {
			if e.Type != "iam.service_account.created" || e.ProjectID != f.projA || (i > 0 && e.Sequence <= got[i-1].Sequence) {
				t.Fatalf("event %d: %+v", i, e)
			}
		}
		// Resume after the first: exactly the other two, then live ones.
		createSAs(t, f.admin, f.projA, 1)
		rest := collect(t, api, f.projA, fmt.Sprint(got[0].Sequence), 3)
		if rest[0].ID != got[1].ID || rest[1].ID != got[2].ID {
			t.Fatalf("resume after %d: %v, %v", got[0].Sequence, rest[0].ID, rest[1].ID)
		}
		if again := collect(t, api, f.projA, got[0].ID, 1); again[0].ID != got[1].ID {
			t.Fatalf("resume by event id: %+v", again[0])
		}

		// The list pages through the same order with filters.
		page := f.admin.Do("GET", "/api/v1/projects/"+f.projA+"/events?limit=2&type=iam.service_account.", nil).Want(t, 200)
		items := page.Items()
		if len(items) != 2 || items[0]["id"] != got[0].ID || page.String("next_cursor") == "" {
			t.Fatalf("first page: %s", page.Body)
		}
		next := f.admin.Do("GET", "/api/v1/projects/"+f.projA+"/events?limit=10&cursor="+page.String("next_cursor"), nil).Want(t, 200)
		if n := len(next.Items()); n != 2 || next.String("next_cursor") != "" {
			t.Fatalf("second page: %s", next.Body)
		}
		if n := len(f.admin.Do("GET", "/api/v1/projects/"+f.projA+"/events?type=apps.", nil).Want(t, 200).Items()); n != 0 {
			t.Fatalf("type filter matched %d", n)
		}
		f.admin.Do("GET", "/api/v1/projects/"+f.projA+"/events?since=yesterday", nil).Want(t, 400)
		f.admin.Do("GET", "/api/v1/projects/"+f.projA+"/events?cursor=bogus", nil).Want(t, 400)

		// Tenancy: a viewer of project B sees B's events only; A is missing.
		uid, viewerB := s.NewUser(f.admin, "viewer-b@example.com")
		f.admin.Do("POST", "/api/v1/projects/"+f.projB+"/members", map[string]string{"user_id": uid, "role": "project_viewer"}).Want(t, 201)
		viewerB.Do("GET", "/api/v1/projects/"+f.projA+"/events", nil).Want(t, 404)
		viewerB.Do("GET", "/api/v1/projects/"+f.projA+"/events/stream", nil).Want(t, 404)
		viewerB.Do("GET", "/api/v1/orgs/"+f.orgA+"/events", nil).Want(t, 404)
		viewerB.Do("GET", "/api/v1/admin/events", nil).Want(t, 403)
		bEvents := collect(t, client.New(s.URL, viewerB.Token), f.projB, "", 2)
		for _, e := range bEvents {
			if e.ProjectID != f.projB {
				t.Fatalf("viewer of B received %+v", e)
			}
		}
		for _, it := range viewerB.Do("GET", "/api/v1/projects/"+f.projB+"/events", nil).Want(t, 200).Items() {
			if it["projectid"] != f.projB {
				t.Fatalf("viewer of B listed %v", it)
			}
		}
		if n := len(f.admin.Do("GET", "/api/v1/admin/events?type=iam.", nil).Want(t, 200).Items()); n != 6 {
			t.Fatalf("platform list: %d events, want 6", n)
		}

		// JetStream got every event once per id.
		js := s.App.EventBus().JS
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cons, err := js.OrderedConsumer(ctx, "GPUAAS_EVENTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.BusSubject(f.orgA, f.projA, ">")}})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for len(seen) < 4 {
			msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
			if err != nil {
				t.Fatalf("jetstream: %d of 4 events: %v", len(seen), err)
			}
			id := msg.Headers().Get(jetstream.MsgIDHeader)
			if seen[id] {
				t.Fatalf("jetstream delivered %s twice", id)
			}
			seen[id] = true
		}

		// Retention: prune everything the bus acknowledged; resuming from
		// before the oldest retained event is 410 with the oldest id.
		if err := s.App.Relay().WaitRuns(ctx, s.App.Relay().Runs()+1); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB.Queries().PruneEvents(ctx, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		r := f.admin.Do("GET", "/api/v1/projects/"+f.projA+"/events/stream", nil, "Last-Event-ID", fmt.Sprint(got[0].Sequence)).Want(t, 410)
		if r.ErrorCode() != "cursor_expired" {
			t.Fatalf("expired resume: %s", r.Body)
		}
		f.admin.Do("GET", "/api/v1/projects/"+f.projA+"/events", nil).Want(t, 200)
		if err := api.StreamEvents(ctx, f.projA, got[0].ID, func(client.Event) error { return nil }); err == nil {
			t.Fatal("stream resumed from a pruned event id")
		}
	})
}
