package httpapi_test

import (
	"strings"
	"testing"

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
	})
}
