package httpapi_test

import (
	"testing"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// A scoped caller's org_id filter is intersected with the project it may
// see, not replaced by the project's org.
func TestAuditOrgFilterHonouredForScopedCallers(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	pid := s.Creds.ProjectID
	uid, u := s.NewUser(admin, "auditor@example.com")
	admin.Do("POST", "/api/v1/projects/"+pid+"/members", map[string]string{"user_id": uid, "role": "project_admin"}).Want(t, 201)
	other := admin.Do("POST", "/api/v1/orgs", map[string]string{"slug": "other-org", "name": "Other"}).Want(t, 201).String("id")

	if n := len(u.Do("GET", "/api/v1/audit-events?project_id="+pid, nil).Want(t, 200).Items()); n == 0 {
		t.Fatal("the project has no audit rows to filter")
	}
	if n := len(u.Do("GET", "/api/v1/audit-events?project_id="+pid+"&org_id="+s.Creds.OrgID, nil).Want(t, 200).Items()); n == 0 {
		t.Fatal("the project's own org filtered everything out")
	}
	if items := u.Do("GET", "/api/v1/audit-events?project_id="+pid+"&org_id="+other, nil).Want(t, 200).Items(); len(items) != 0 {
		t.Fatalf("org_id of another org ignored: %d rows", len(items))
	}
}
