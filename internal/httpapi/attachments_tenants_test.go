package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A platform-managed instance serves tenants of several orgs: a tenant
// that lists its attachments, or reads its timeline, through its own
// project sees its own org's attachment only, never another tenant's
// project or org; the platform admin who owns it sees every attachment.
func TestPlatformManagedAttachmentsHideOtherTenants(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		e := newManagedEnv(t, d)
		cr := e.admin.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "managed", "version": "1.0.0", "display_name": "managed", "operating_mode": "platform_managed"}).Want(t, 202)
		id := cr.String("id")
		waitOp(t, e.admin, e.pid, cr.String("operation_id"))

		tenant := func(slug string) (org, project string) {
			org = e.admin.Do("POST", "/api/v1/orgs", map[string]string{"slug": slug, "name": slug}).Want(t, 201).String("id")
			project = e.admin.Do("POST", "/api/v1/orgs/"+org+"/projects", map[string]string{"slug": slug + "-team", "name": slug}).Want(t, 201).String("id")
			e.admin.Do("POST", e.path("/app-instances/"+id+"/attachments"), map[string]string{"project_id": project}).Want(t, 201)
			return org, project
		}
		xOrg, xProject := tenant("tenant-x")
		yOrg, yProject := tenant("tenant-y")
		uX, vX := e.s.NewUser(e.admin, "x@example.com")
		e.admin.Do("POST", "/api/v1/projects/"+xProject+"/members", map[string]string{"user_id": uX, "role": "project_viewer"}).Want(t, 201)

		got := vX.Do("GET", "/api/v1/projects/"+xProject+"/app-instances/"+id+"/attachments", nil).Want(t, 200)
		if strings.Contains(string(got.Body), yProject) || strings.Contains(string(got.Body), yOrg) {
			t.Fatalf("tenant X's list names tenant Y (org %s, project %s): %s", yOrg, yProject, got.Body)
		}
		if items := got.Items(); len(items) != 1 || items[0]["project_id"] != xProject || items[0]["org_id"] != xOrg {
			t.Fatalf("tenant X's list: want its own attachment only: %s", got.Body)
		}
		if all := e.admin.Do("GET", e.path("/app-instances/"+id+"/attachments"), nil).Want(t, 200).Items(); len(all) != 2 {
			t.Fatalf("the platform admin's list: want both attachments, got %v", all)
		}
		// The instance's timeline, read through tenant X's project, carries
		// X's attachment and none of Y's.
		tl := vX.Do("GET", "/api/v1/projects/"+xProject+"/app-instances/"+id+"/events", nil).Want(t, 200)
		if strings.Contains(string(tl.Body), yProject) || !strings.Contains(string(tl.Body), xProject) {
			t.Fatalf("tenant X's timeline of the instance: want its own attachment only, not tenant Y's project %s: %s", yProject, tl.Body)
		}
		if all := e.admin.Do("GET", e.path("/app-instances/"+id+"/events"), nil).Want(t, 200); !strings.Contains(string(all.Body), yProject) {
			t.Fatalf("the platform admin's timeline: want every attachment: %s", all.Body)
		}

		// The event feeds of X's project and X's org (list and stream)
		// carry X's attachment and neither Y's attachment nor its detach,
		// which came while X was still attached; the owner's feed has all.
		e.admin.Do("DELETE", e.path("/app-instances/"+id+"/attachments/"+yProject), nil).Want(t, 204)
		aX, xAdmin := e.s.NewUser(e.admin, "x-admin@example.com")
		e.admin.Do("POST", "/api/v1/orgs/"+xOrg+"/members", map[string]string{"user_id": aX, "role": "org_admin"}).Want(t, 201)
		createSAs(t, e.admin, xProject, 1) // the streams' end marker
		attachmentsIn := func(what string, evs []client.Event) (own int) {
			t.Helper()
			for _, ev := range evs {
				if strings.Contains(string(ev.Data), yProject) || strings.Contains(string(ev.Data), yOrg) {
					t.Fatalf("%s carries tenant Y's %s (project %s): %s", what, ev.Type, yProject, ev.Data)
				}
				if ev.Type == "apps.instance.project_attached" && strings.Contains(string(ev.Data), xProject) {
					own++
				}
			}
			return own
		}
		for _, r := range []struct{ what, token, path string }{
			{"X's project feed", vX.Token, client.ProjectEventsPath(xProject)},
			{"X's org feed", xAdmin.Token, client.OrgEventsPath(xOrg)},
		} {
			if own := attachmentsIn(r.what+" (stream)", followUntil(t, e.s, r.token, r.path, "", "iam.service_account.created", xProject)); own != 1 {
				t.Fatalf("%s (stream): X's attachment %d times, want once", r.what, own)
			}
			l, err := client.New(e.s.URL, r.token).ListEvents(context.Background(), r.path, client.EventFilter{Type: "apps.instance.project_"})
			if err != nil {
				t.Fatal(err)
			}
			if own := attachmentsIn(r.what+" (list)", l.Items); own != 1 {
				t.Fatalf("%s (list): X's attachment %d times, want once", r.what, own)
			}
		}
		owner, err := client.New(e.s.URL, e.admin.Token).ListEvents(context.Background(), client.ProjectEventsPath(e.pid), client.EventFilter{Type: "apps.instance.project_"})
		if err != nil {
			t.Fatal(err)
		}
		var ofY int
		for _, ev := range owner.Items {
			if strings.HasPrefix(ev.Type, "apps.instance.project_") && strings.Contains(string(ev.Data), yProject) {
				ofY++
			}
		}
		if ofY != 2 {
			t.Fatalf("the owner's feed: tenant Y's attach and detach %d times, want 2", ofY)
		}
	})
}
