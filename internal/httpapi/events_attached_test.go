package httpapi_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// followUntil streams path's events after last as token until one of
// type stop arrives in project stopProject, and returns those before it.
func followUntil(t *testing.T, s *servertest.Server, token, path, last, stop, stopProject string) []client.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []client.Event
	errDone := errors.New("done")
	err := client.New(s.URL, token).FollowEvents(ctx, path, client.EventFilter{}, last, func(e client.Event) error {
		if e.Type == stop && e.ProjectID == stopProject {
			return errDone
		}
		got = append(got, e)
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatalf("stream %s: %d events before the end: %v", path, len(got), err)
	}
	return got
}

// The events of a tenant-shared instance reach the projects attached to
// it, on both databases: a viewer of an attached project lists and streams
// the instance's apps.instance.* events through their own project (the
// retained ones from before the attachment too), resumes after one of
// them by its id, and gets no other event of the home project; a viewer
// of a project that is not attached gets nothing of it; once detached, the
// instance's new events (the detach itself included) no longer arrive.
func TestAttachedProjectReadsSharedInstanceEvents(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		manifest := modesManifest("shared-ev", []string{"tenant_dedicated"}, []string{"project", "tenant"})
		e := newInstanceEnv(t, d, "shared-ev", map[string]v1.Image{"1.0.0": nil, "2.0.0": nil}, manifest, 1)
		e.node.serve(t, okResult)
		org := e.s.Creds.OrgID
		e.admin.Do("PUT", e.path("/apps/entitlements/shared-ev"), map[string]any{"enabled": true,
			"policy_overrides": map[string]any{"allowed_control_plane_scopes": []string{"project", "tenant"}}}).Want(t, 200)
		e.admin.Do("PUT", "/api/v1/orgs/"+org+"/apps/entitlements/shared-ev", map[string]any{"enabled": true}).Want(t, 200)
		project := func(slug string) string {
			return e.admin.Do("POST", "/api/v1/orgs/"+org+"/projects", map[string]string{"slug": slug, "name": slug}).Want(t, 201).String("id")
		}
		pb, pc := project("attached"), project("unattached")
		uB, vB := e.s.NewUser(e.admin, "viewer-attached@example.com")
		uC, vC := e.s.NewUser(e.admin, "viewer-unattached@example.com")
		e.admin.Do("POST", "/api/v1/projects/"+pb+"/members", map[string]string{"user_id": uB, "role": "project_viewer"}).Want(t, 201)
		e.admin.Do("POST", "/api/v1/projects/"+pc+"/members", map[string]string{"user_id": uC, "role": "project_viewer"}).Want(t, 201)

		cr := e.admin.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "shared-ev", "version": "1.0.0",
			"display_name": "shared", "control_plane_scope": "tenant"}).Want(t, 202)
		id, subject := cr.String("id"), "app-instances/"+cr.String("id")
		if op := waitOp(t, e.admin, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("create: %s", op.Body)
		}
		createSAs(t, e.admin, e.pid, 1) // an event of the home project, not of the instance
		e.admin.Do("POST", e.path("/app-instances/"+id+"/attachments"), map[string]string{"project_id": pb}).Want(t, 201)

		// Only the instance's lifecycle, of the home project's events.
		onlyInstance := func(what string, evs []client.Event) (n int) {
			t.Helper()
			for _, ev := range evs {
				if ev.ProjectID == pb {
					continue
				}
				if ev.ProjectID != e.pid || ev.Subject != subject || !strings.HasPrefix(ev.Type, "apps.instance.") {
					t.Fatalf("%s: an event of the home project that is not the shared instance's: %s %s %s", what, ev.Type, ev.ProjectID, ev.Subject)
				}
				n++
			}
			return n
		}
		noneOfInstance := func(what string, evs []client.Event) {
			t.Helper()
			for _, ev := range evs {
				if ev.ProjectID == e.pid || ev.Subject == subject {
					t.Fatalf("%s: %s %s %s", what, ev.Type, ev.ProjectID, ev.Subject)
				}
			}
		}
		api := client.New(e.s.URL, vB.Token)
		// The stream from the start: the instance's events from before the
		// attachment, up to the attachment's.
		if n := onlyInstance("stream from the start", followUntil(t, e.s, vB.Token, client.ProjectEventsPath(pb), "", "apps.instance.project_attached", e.pid)); n < 2 {
			t.Fatalf("the stream from the start carried %d of the instance's events", n)
		}
		l, err := api.ListEvents(context.Background(), client.ProjectEventsPath(pb), client.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, ev := range l.Items {
			if ev.Subject == subject {
				types = append(types, ev.Type)
			}
		}
		if onlyInstance("list", l.Items) < 3 || types[0] != "apps.instance.requested" || types[len(types)-1] != "apps.instance.project_attached" {
			t.Fatalf("the attached project's list: %v", types)
		}
		for i := 1; i < len(l.Items); i++ {
			if l.Items[i].Sequence <= l.Items[i-1].Sequence {
				t.Fatalf("list out of order: %d after %d", l.Items[i].Sequence, l.Items[i-1].Sequence)
			}
		}
		if f, err := api.ListEvents(context.Background(), client.ProjectEventsPath(pb), client.EventFilter{Subject: subject, Type: "apps.instance.project_"}); err != nil || len(f.Items) != 1 {
			t.Fatalf("filtered list: %v %v", f, err)
		}
		lc, err := client.New(e.s.URL, vC.Token).ListEvents(context.Background(), client.ProjectEventsPath(pc), client.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		noneOfInstance("the unattached project's list", lc.Items)

		// Resume by an event id of the instance, through the attached project.
		var first, second client.Event
		for _, ev := range l.Items {
			if ev.Subject == subject && first.ID == "" {
				first = ev
			} else if ev.Subject == subject && second.ID == "" {
				second = ev
			}
		}
		errDone := errors.New("done")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := api.FollowEvents(ctx, client.ProjectEventsPath(pb), client.EventFilter{}, first.ID, func(ev client.Event) error {
			if ev.ID != second.ID {
				t.Errorf("resumed after %s: got %s (%s), want %s", first.ID, ev.ID, ev.Type, second.ID)
			}
			return errDone
		}); !errors.Is(err, errDone) {
			t.Fatalf("resume by the instance's event id: %v", err)
		}
		cancel()

		// Live: an upgrade's events reach the attached project's stream,
		// the home project's other events do not, the unattached project
		// gets none. A service account created in each reader's project
		// marks the end.
		last := strconv.FormatInt(l.Items[len(l.Items)-1].Sequence, 10)
		up := e.admin.Do("POST", e.path("/app-instances/"+id+"/upgrade"), map[string]any{"target_version": "2.0.0"}).Want(t, 202)
		if op := waitOp(t, e.admin, e.pid, up.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("upgrade: %s", op.Body)
		}
		createSAs(t, e.admin, e.pid, 1)
		createSAs(t, e.admin, pb, 1)
		createSAs(t, e.admin, pc, 1)
		live := followUntil(t, e.s, vB.Token, client.ProjectEventsPath(pb), last, "iam.service_account.created", pb)
		if onlyInstance("stream", live) == 0 {
			t.Fatalf("the attached project's stream carried none of the upgrade's events: %v", live)
		}
		noneOfInstance("the unattached project's stream",
			followUntil(t, e.s, vC.Token, client.ProjectEventsPath(pc), "", "iam.service_account.created", pc))

		// Detached: the instance's new events no longer arrive.
		lb, err := api.ListEvents(context.Background(), client.ProjectEventsPath(pb), client.EventFilter{Type: "iam.service_account.created"})
		if err != nil || len(lb.Items) != 1 {
			t.Fatalf("the marker: %v %v", lb, err)
		}
		e.admin.Do("DELETE", e.path("/app-instances/"+id+"/attachments/"+pb), nil).Want(t, 204)
		dec := e.admin.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
		if op := waitOp(t, e.admin, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("decommission: %s", op.Body)
		}
		createSAs(t, e.admin, pb, 1)
		after := followUntil(t, e.s, vB.Token, client.ProjectEventsPath(pb), strconv.FormatInt(lb.Items[0].Sequence, 10), "iam.service_account.created", pb)
		noneOfInstance("the stream after the detach", after)
	})
}
