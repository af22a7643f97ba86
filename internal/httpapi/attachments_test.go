package httpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A tenant-shared instance on both databases: only an org-level role
// launches it (the home project's operator is refused, naming the reason);
// the members of two attached projects read it through their own projects,
// an unattached one does not see it; usage it reports for an attached
// project is billed there; the home project's operator reads it but
// cannot change it; the org admin attaches, detaches, upgrades and
// decommissions it; attachments are to projects of the same org only, and
// to shared instances only.
func TestTenantSharedInstance(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		manifest := func(version, imageRef string) map[string]any {
			m := modesManifest("shared", []string{"tenant_dedicated"}, []string{"project", "tenant"})(version, imageRef)
			m["metering"] = map[string]any{"kind": "tokens"}
			return m
		}
		e := newInstanceEnv(t, d, "shared", map[string]v1.Image{"1.0.0": nil, "2.0.0": nil}, manifest, 1)
		e.node.serve(t, okResult)
		e.admin.Do("PUT", e.path("/apps/entitlements/shared"), map[string]any{"enabled": true,
			"policy_overrides": map[string]any{"allowed_control_plane_scopes": []string{"project", "tenant"}}}).Want(t, 200)
		org := e.s.Creds.OrgID
		project := func(slug string) string {
			return e.admin.Do("POST", "/api/v1/orgs/"+org+"/projects", map[string]string{"slug": slug, "name": slug}).Want(t, 201).String("id")
		}
		pb, pc, pd := project("team-b"), project("team-c"), project("team-d")
		uB, vB := e.s.NewUser(e.admin, "viewer-b@example.com")
		uC, vC := e.s.NewUser(e.admin, "viewer-c@example.com")
		uD, vD := e.s.NewUser(e.admin, "viewer-d@example.com")
		e.admin.Do("POST", "/api/v1/projects/"+pd+"/members", map[string]string{"user_id": uD, "role": "project_viewer"}).Want(t, 201)
		e.admin.Do("POST", "/api/v1/projects/"+pb+"/members", map[string]string{"user_id": uB, "role": "project_viewer"}).Want(t, 201)
		e.admin.Do("POST", "/api/v1/projects/"+pc+"/members", map[string]string{"user_id": uC, "role": "project_viewer"}).Want(t, 201)

		launch := map[string]any{"app_slug": "shared", "version": "1.0.0", "display_name": "shared", "control_plane_scope": "tenant"}
		// The org's instance is checked against the org's entitlement: the
		// project's does not launch it, a project role does not entitle
		// the org, and the org's overrides narrow the launch.
		if r := e.admin.Do("POST", e.path("/app-instances"), launch); r.Status != 400 || !strings.Contains(string(r.Body), "not_entitled") || !strings.Contains(string(r.Body), "org "+org) {
			t.Fatalf("a shared instance without the org's entitlement: %d %s", r.Status, r.Body)
		}
		orgEnt := "/api/v1/orgs/" + org + "/apps/entitlements/shared"
		if r := e.bot.Do("PUT", orgEnt, map[string]any{"enabled": true}); r.Status != 403 && r.Status != 404 {
			t.Fatalf("a project's operator entitles the org: %d %s", r.Status, r.Body)
		}
		e.admin.Do("PUT", orgEnt, map[string]any{"enabled": true, "policy_overrides": map[string]any{"allowed_control_plane_scopes": []string{"project"}}}).Want(t, 200)
		if r := e.admin.Do("POST", e.path("/app-instances"), launch); r.Status != 400 || !strings.Contains(string(r.Body), "/control_plane_scope") {
			t.Fatalf("a launch the org's entitlement narrows out: %d %s", r.Status, r.Body)
		}
		ent := e.admin.Do("PUT", orgEnt, map[string]any{"enabled": true}).Want(t, 200)
		if ent.String("org_id") != org || ent.String("project_id") != "" || jsonAt(ent, "enabled") != true {
			t.Fatalf("org entitlement: %s", ent.Body)
		}
		if items := e.admin.Do("GET", "/api/v1/orgs/"+org+"/apps/entitlements", nil).Want(t, 200).Items(); len(items) != 1 || items[0]["app_slug"] != "shared" {
			t.Fatalf("org entitlements: %v", items)
		}
		if r := e.bot.Do("POST", e.path("/app-instances"), launch); r.Status != 403 || !strings.Contains(string(r.Body), "org_role_required") {
			t.Fatalf("the home project's operator launches a shared instance: %d %s", r.Status, r.Body)
		}
		cr := e.admin.Do("POST", e.path("/app-instances"), launch).Want(t, 202)
		id := cr.String("id")
		if op := waitOp(t, e.admin, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("create: %s", op.Body)
		}
		inst := e.admin.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
		if inst.String("control_plane_scope") != "tenant" || inst.String("tenant_boundary_mode") == "project_isolated" {
			t.Fatalf("a shared instance: %s", inst.Body)
		}
		through := func(p string) string { return "/api/v1/projects/" + p + "/app-instances/" + id }
		vB.Do("GET", through(pb), nil).Want(t, 404) // not attached yet

		// Attaching: the org admin only, a project of the org, a shared instance.
		if r := e.bot.Do("POST", e.path("/app-instances/"+id+"/attachments"), map[string]string{"project_id": pb}); r.Status != 403 || !strings.Contains(string(r.Body), "org_role_required") {
			t.Fatalf("the home operator attaches: %d %s", r.Status, r.Body)
		}
		other := e.admin.Do("POST", "/api/v1/orgs", map[string]string{"slug": "other-org", "name": "Other"}).Want(t, 201).String("id")
		foreign := e.admin.Do("POST", "/api/v1/orgs/"+other+"/projects", map[string]string{"slug": "foreign", "name": "Foreign"}).Want(t, 201).String("id")
		if r := e.admin.Do("POST", e.path("/app-instances/"+id+"/attachments"), map[string]string{"project_id": foreign}); r.Status != 400 || !strings.Contains(string(r.Body), "/project_id") {
			t.Fatalf("attach another org's project: %d %s", r.Status, r.Body)
		}
		at := e.admin.Do("POST", e.path("/app-instances/"+id+"/attachments"), map[string]string{"project_id": pb}).Want(t, 201)
		if at.String("project_id") != pb || at.String("org_id") != org {
			t.Fatalf("attachment: %s", at.Body)
		}
		e.admin.Do("POST", e.path("/app-instances/"+id+"/attachments"), map[string]string{"project_id": pb}).Want(t, 201) // again: the same
		e.admin.Do("POST", e.path("/app-instances/"+id+"/attachments"), map[string]string{"project_id": pd}).Want(t, 201)
		if items := e.bot.Do("GET", e.path("/app-instances/"+id+"/attachments"), nil).Want(t, 200).Items(); len(items) != 2 {
			t.Fatalf("attachments: %v", items)
		}

		// Use from the attached project; none from the unattached one.
		if got := vB.Do("GET", through(pb), nil).Want(t, 200); got.String("id") != id || got.String("project_id") != e.pid {
			t.Fatalf("read through the attached project: %s", got.Body)
		}
		vB.Do("GET", through(pb)+"/events", nil).Want(t, 200)
		vD.Do("GET", through(pd), nil).Want(t, 200) // the second attached project too
		if items := vB.Do("GET", "/api/v1/projects/"+pb+"/app-instances", nil).Want(t, 200).Items(); len(items) != 1 || items[0]["id"] != id {
			t.Fatalf("the attached project's list: %v", items)
		}
		if items := vC.Do("GET", "/api/v1/projects/"+pc+"/app-instances", nil).Want(t, 200).Items(); len(items) != 0 {
			t.Fatalf("an unattached project's list: %v", items)
		}
		vC.Do("GET", through(pc), nil).Want(t, 404)
		vC.Do("GET", "/api/v1/projects/"+pc+"/app-instances/"+id+"/events", nil).Want(t, 404)
		vB.Do("POST", through(pb)+"/upgrade", map[string]any{"target_version": "2.0.0"}).Want(t, 403)

		// Usage the instance reports for an attached project is that
		// project's; a project not attached is refused.
		usage := func(id2, project string) *servertest.Response {
			ev, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": id2, "source": "//shared", "type": "gpuaas.usage.v1", "projectid": project,
				"time": time.Now().UTC().Format(time.RFC3339Nano), "data": map[string]any{"usage_unit": "tokens", "quantity": 10}})
			return workloadClient(t, e, id).Do("POST", e.path("/app-instances/"+id+"/usage"), ev, "Content-Type", billing.MediaTypeEvent)
		}
		usage("for-b", pb).Want(t, 200)
		if r := usage("for-c", pc); r.Status != 422 || r.ErrorCode() != "usage_project_not_attached" {
			t.Fatalf("usage for an unattached project: %d %s", r.Status, r.Body)
		}
		recs := e.admin.Do("GET", "/api/v1/billing/usage?project_id="+pb+"&app_instance_id="+id, nil).Want(t, 200).Items() // the attached project's bill
		if len(recs) != 1 || recs[0]["project_id"] != pb || recs[0]["org_id"] != org {
			t.Fatalf("usage attributed: %v", recs)
		}

		// The home project's operator reads it but does not change it.
		e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
		for _, c := range []struct{ path string }{{"/upgrade"}, {"/decommission"}} {
			if r := e.bot.Do("POST", e.path("/app-instances/"+id+c.path), map[string]any{"target_version": "2.0.0"}); r.Status != 403 || !strings.Contains(string(r.Body), "org_role_required") {
				t.Fatalf("the home operator %s: %d %s", c.path, r.Status, r.Body)
			}
		}
		up := e.admin.Do("POST", e.path("/app-instances/"+id+"/upgrade"), map[string]any{"target_version": "2.0.0"}).Want(t, 202)
		if op := waitOp(t, e.admin, e.pid, up.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("upgrade by the org admin: %s", op.Body)
		}

		// A project-scoped instance is not shared.
		own := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "shared", "version": "1.0.0", "display_name": "own"}).Want(t, 202)
		waitOp(t, e.bot, e.pid, own.String("operation_id"))
		if r := e.admin.Do("POST", e.path("/app-instances/"+own.String("id")+"/attachments"), map[string]string{"project_id": pb}); r.Status != 409 || !strings.Contains(string(r.Body), "not_tenant_shared") {
			t.Fatalf("attach a project's own instance: %d %s", r.Status, r.Body)
		}

		// Detached, the project loses it at once.
		if r := e.admin.Do("DELETE", e.path("/app-instances/"+id+"/attachments/"+pb), nil); r.Status != 204 {
			t.Fatalf("detach: %d %s", r.Status, r.Body)
		}
		vB.Do("GET", through(pb), nil).Want(t, 404)
		e.admin.Do("DELETE", e.path("/app-instances/"+id+"/attachments/"+pb), nil).Want(t, 404)
		var events []string
		for _, ev := range timeline(t, e, id) {
			if strings.Contains(ev, "project_") {
				events = append(events, ev)
			}
		}
		if strings.Join(events, ",") != "apps.instance.project_attached,apps.instance.project_attached,apps.instance.project_detached" {
			t.Fatalf("attachment events: %v", events)
		}
		dec := e.admin.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
		if op := waitOp(t, e.admin, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
			t.Fatalf("decommission by the org admin: %s", op.Body)
		}
	})
}

// A platform-managed instance: never the default (a plain launch is
// tenant_dedicated), refused when the manifest does not offer it, launched
// and changed only by a platform admin (an org admin is refused), attached
// to a tenant's project in another org, whose member then reads it.
func TestPlatformManagedInstance(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		e := newManagedEnv(t, d)
		plain := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "managed", "version": "1.0.0", "display_name": "plain"}).Want(t, 202)
		if plain.String("operating_mode") != "tenant_dedicated" || plain.String("control_plane_scope") != "project" {
			t.Fatalf("the default: %s", plain.Body)
		}
		launch := map[string]any{"app_slug": "managed", "version": "1.0.0", "display_name": "managed", "operating_mode": "platform_managed"}
		if r := e.bot.Do("POST", e.path("/app-instances"), launch); r.Status != 403 || !strings.Contains(string(r.Body), "platform_role_required") {
			t.Fatalf("a project operator launches a platform-managed instance: %d %s", r.Status, r.Body)
		}
		// adminOf is a new person, an org admin of org.
		adminOf := func(org, email string) *servertest.Client {
			u, c := e.s.NewUser(e.admin, email)
			e.admin.Do("POST", "/api/v1/orgs/"+org+"/members", map[string]string{"user_id": u, "role": "org_admin"}).Want(t, 201)
			return c
		}
		orgAdmin := adminOf(e.s.Creds.OrgID, "org-admin@example.com")
		if r := orgAdmin.Do("POST", e.path("/app-instances"), launch); r.Status != 403 || !strings.Contains(string(r.Body), "platform_role_required") {
			t.Fatalf("an org admin launches a platform-managed instance: %d %s", r.Status, r.Body)
		}
		cr := e.admin.Do("POST", e.path("/app-instances"), launch).Want(t, 202)
		id := cr.String("id")
		if cr.String("control_plane_scope") != "platform" {
			t.Fatalf("platform-managed: %s", cr.Body)
		}
		waitOp(t, e.admin, e.pid, cr.String("operation_id"))
		tenant := e.admin.Do("POST", "/api/v1/orgs", map[string]string{"slug": "tenant-x", "name": "Tenant X"}).Want(t, 201).String("id")
		tp := e.admin.Do("POST", "/api/v1/orgs/"+tenant+"/projects", map[string]string{"slug": "team-x", "name": "X"}).Want(t, 201).String("id")
		uX, vX := e.s.NewUser(e.admin, "x@example.com")
		e.admin.Do("POST", "/api/v1/projects/"+tp+"/members", map[string]string{"user_id": uX, "role": "project_viewer"}).Want(t, 201)
		vX.Do("GET", "/api/v1/projects/"+tp+"/app-instances/"+id, nil).Want(t, 404)
		orgAdmin.Do("POST", e.path("/app-instances/"+id+"/attachments"), map[string]string{"project_id": tp}).Want(t, 403)
		at := e.admin.Do("POST", e.path("/app-instances/"+id+"/attachments"), map[string]string{"project_id": tp}).Want(t, 201)
		if at.String("org_id") != tenant {
			t.Fatalf("attachment to a tenant: %s", at.Body)
		}
		if got := vX.Do("GET", "/api/v1/projects/"+tp+"/app-instances/"+id, nil).Want(t, 200); got.String("operating_mode") != "platform_managed" {
			t.Fatalf("the tenant reads it: %s", got.Body)
		}
		// The tenant org's own event reads carry the instance's lifecycle
		// (its rows are the platform project's, in another org), from
		// before the attachment up to it; another org's carry none of it.
		xAdmin := adminOf(tenant, "x-admin@example.com")
		n := 0
		for _, ev := range followUntil(t, e.s, xAdmin.Token, client.OrgEventsPath(tenant), "", "apps.instance.project_attached", e.pid) {
			if ev.OrgID == tenant {
				continue
			}
			if ev.Subject != "app-instances/"+id || !strings.HasPrefix(ev.Type, "apps.instance.") {
				t.Fatalf("the tenant org's stream: an event of the platform's org that is not the instance's: %s %s", ev.Type, ev.Subject)
			}
			n++
		}
		if n < 2 {
			t.Fatalf("the tenant org's stream carried %d of the instance's events before its attachment", n)
		}
		other := e.admin.Do("POST", "/api/v1/orgs", map[string]string{"slug": "tenant-y", "name": "Tenant Y"}).Want(t, 201).String("id")
		yAdmin := adminOf(other, "y-admin@example.com")
		ly, err := client.New(e.s.URL, yAdmin.Token).ListEvents(context.Background(), client.OrgEventsPath(other), client.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range ly.Items {
			if ev.OrgID != other {
				t.Fatalf("an unattached org's list: %s %s of org %s", ev.Type, ev.Subject, ev.OrgID)
			}
		}
		orgAdmin.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 403)
		dec := e.admin.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
		waitOp(t, e.admin, e.pid, dec.String("operation_id"))
	})
}
