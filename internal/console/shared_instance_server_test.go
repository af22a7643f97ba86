package console_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A shared instance (control_plane_scope tenant) attached to a project is
// shown on the console to a member of that project only (no role in its
// home project), as the API reads it to them through their project; a
// member of a project it is not attached to gets "Not found", as from the
// API.
func TestSharedInstancePageThroughAnAttachedProject(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		s := servertest.Start(t, d)
		admin := s.Admin()
		ctx := context.Background()
		now := time.Now().UTC()
		id := uuid.Must(uuid.NewV7()).String()
		if err := s.DB.Queries().InsertAppInstance(ctx, instances.AppInstance{ID: id, OrgID: s.Creds.OrgID, ProjectID: s.Creds.ProjectID,
			AppSlug: "shared-app", DisplayName: "shared-notebook", Version: "1.0.0", Status: "running",
			OperatingMode: "tenant_dedicated", ControlPlaneScope: "tenant", RuntimeBackend: "launchable_oci",
			TenantBoundaryMode: "tenant_shared", Effective: []byte(`{"resources":{"gpu_count":1}}`), CreatedBy: "user:test",
			CreatedAt: now, UpdatedAt: now, GPUUUIDs: []string{"GPU-5f1c"}}); err != nil {
			t.Fatal(err)
		}
		member := func(slug, email string) (string, string) {
			p := admin.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/projects", map[string]string{"slug": slug, "name": slug}).Want(t, http.StatusCreated).String("id")
			u := admin.Do("POST", "/api/v1/users", map[string]string{"email": email, "password": "a-long-password-" + slug}).Want(t, http.StatusCreated).String("id")
			admin.Do("POST", "/api/v1/projects/"+p+"/members", map[string]string{"user_id": u, "role": "project_viewer"}).Want(t, http.StatusCreated)
			return p, u
		}
		attached, bea := member("team-b", "bea@example.com")
		other, _ := member("team-c", "cal@example.com")
		// Bea works in a second project too, which the instance is not
		// attached to.
		beasOther := admin.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/projects", map[string]string{"slug": "team-d", "name": "team-d"}).Want(t, http.StatusCreated).String("id")
		admin.Do("POST", "/api/v1/projects/"+beasOther+"/members", map[string]string{"user_id": bea, "role": "project_member"}).Want(t, http.StatusCreated)
		if err := s.DB.InTx(ctx, func(q *store.Queries) error {
			return q.InsertInstanceAttachment(ctx, instances.Attachment{InstanceID: id, ProjectID: attached, OrgID: s.Creds.OrgID,
				AttachedBy: "user:test", CreatedAt: now})
		}); err != nil {
			t.Fatal(err)
		}
		// The API: read through the attached project, not through its home.
		beaAPI := s.Login("bea@example.com", "a-long-password-team-b")
		beaAPI.Do("GET", "/api/v1/projects/"+attached+"/app-instances/"+id, nil).Want(t, http.StatusOK)
		beaAPI.Do("GET", "/api/v1/projects/"+s.Creds.ProjectID+"/app-instances/"+id, nil).Want(t, http.StatusNotFound, http.StatusForbidden)

		open := func(email, pw, project string) (int, string) {
			session := sessionIn(t, s, email, pw, project)
			if shown := strings.Contains(fetch(t, s.URL+"/workloads", session), id); shown != (project == attached) {
				t.Errorf("%s: the instance list shows the shared instance: %t", email, shown)
			}
			req, _ := http.NewRequest("GET", s.URL+"/workloads/instance/"+id, nil)
			req.AddCookie(session)
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, page := open("bea@example.com", "a-long-password-team-b", attached); code != http.StatusOK || !strings.Contains(page, "shared-notebook") ||
			!strings.Contains(page, `data-live="`+attached+`"`) || !strings.Contains(page, "<code>GPU-5f1c</code>") {
			t.Errorf("the attached project's member: the instance page answers %d\n%s", code, page)
		}
		// A link followed while Bea works in her other project opens
		// through the attached one all the same.
		if code, page := open("bea@example.com", "a-long-password-team-b", beasOther); code != http.StatusOK ||
			!strings.Contains(page, `data-live="`+attached+`"`) {
			t.Errorf("the attached project's member, working in another project: the instance page answers %d\n%s", code, page)
		}
		if code, _ := open("cal@example.com", "a-long-password-team-c", other); code != http.StatusNotFound {
			t.Errorf("an unattached project's member: the instance page answers %d, want 404", code)
		}
	})
}
