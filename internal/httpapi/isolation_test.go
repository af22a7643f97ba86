package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// sampleBodies are valid request bodies for routes whose handlers validate
// the body, so a sweep reaches the permission check rather than stopping at
// "missing field". Routes not listed get {}.
var sampleBodies = map[string]any{
	"POST /api/v1/orgs":                          map[string]string{"slug": "sweep-org", "name": "Sweep"},
	"POST /api/v1/orgs/{org_id}/projects":        map[string]string{"slug": "sweep-proj", "name": "Sweep"},
	"POST /api/v1/orgs/{org_id}/members":         map[string]string{"user_id": "USER", "role": "project_viewer"},
	"POST /api/v1/projects/{project_id}/members": map[string]string{"user_id": "USER", "role": "project_viewer"},
	"POST /api/v1/users":                         map[string]string{"email": "sweep@example.com", "password": "long-enough-password"},
}

type tenancyFixture struct {
	s                  *servertest.Server
	admin              *servertest.Client
	orgA, projA        string
	orgB, projB, slugB string
	userA              string
}

func newTenancy(t *testing.T, d store.Dialect) tenancyFixture {
	s := servertest.Start(t, d)
	admin := s.Admin()
	orgB := admin.Do("POST", "/api/v1/orgs", map[string]string{"slug": "tenant-b", "name": "Tenant B"}).Want(t, 201).String("id")
	projB := admin.Do("POST", "/api/v1/orgs/"+orgB+"/projects", map[string]string{"slug": "secret-b", "name": "Secret B"}).Want(t, 201).String("id")
	return tenancyFixture{s: s, admin: admin, orgA: s.Creds.OrgID, projA: s.Creds.ProjectID, orgB: orgB, projB: projB, slugB: "secret-b"}
}

// fill substitutes path parameters: org and project ids from ids, anything
// else a random id.
func fill(path string, ids map[string]string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, "{") {
			name := strings.Trim(s, "{}")
			if v, ok := ids[name]; ok {
				segs[i] = v
			} else {
				segs[i] = uuid.NewString()
			}
		}
	}
	return strings.Join(segs, "/")
}

func body(method, pattern, userID string) any {
	if method == http.MethodGet || method == http.MethodDelete {
		return nil
	}
	b, ok := sampleBodies[method+" "+pattern]
	if !ok {
		return map[string]any{}
	}
	if m, ok := b.(map[string]string); ok {
		c := map[string]string{}
		for k, v := range m {
			if v == "USER" {
				v = userID
			}
			c[k] = v
		}
		return c
	}
	return b
}

// A member of org A — even its org admin, or a project-admin service
// account of one of its projects — sees nothing of org B: every route that
// names an org-B id answers exactly as it does for an id that does not
// exist, and no response carries org B's identifiers.
func TestOrgMemberSeesNothingOfAnotherOrg(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		f := newTenancy(t, d)
		// Roles are read per request, so the token from before the grant
		// already carries the new role.
		uid, a := f.s.NewUser(f.admin, "a-admin@example.com")
		f.admin.Do("POST", "/api/v1/orgs/"+f.orgA+"/members", map[string]string{"user_id": uid, "role": "org_admin"}).Want(t, 201)
		sa := f.admin.Do("POST", "/api/v1/projects/"+f.projA+"/service-accounts",
			map[string]any{"name": "bot", "slug": "bot", "roles": []string{"project_admin"}}).Want(t, 201)
		key := client.KeyFile{Type: client.KeyFileType, ServiceAccountID: sa.String("id"), KeyID: sa.String("key_id"),
			PrivateKeyPEM: sa.String("private_key_pem"), TokenURL: sa.String("token_url")}
		bot := f.s.AsServiceAccount(key)
		for _, who := range []struct {
			name string
			c    *servertest.Client
		}{{"org_admin", a}, {"service_account", bot}} {
			t.Run(who.name, func(t *testing.T) { sweepOtherOrg(t, f, who.c, uid) })
		}
	})
}

func sweepOtherOrg(t *testing.T, f tenancyFixture, a *servertest.Client, uid string) {
	secrets := []string{f.orgB, f.projB, f.slugB, "tenant-b"}
	for _, rt := range f.s.App.API.Routes() {
		if rt.Public {
			continue
		}
		t.Run(rt.Method+" "+rt.Path, func(t *testing.T) {
			real := fill(rt.Path, map[string]string{"org_id": f.orgB, "project_id": f.projB})
			fake := fill(rt.Path, map[string]string{"org_id": uuid.NewString(), "project_id": uuid.NewString()})
			r1 := a.Do(rt.Method, real, body(rt.Method, rt.Path, uid))
			for _, s := range secrets {
				// Echoing back an id the caller itself sent reveals nothing.
				if strings.Contains(real, s) {
					continue
				}
				if strings.Contains(string(r1.Body), s) {
					t.Fatalf("response leaks %q: %s", s, r1.Body)
				}
			}
			if !strings.Contains(rt.Path, "{org_id}") && !strings.Contains(rt.Path, "{project_id}") {
				return
			}
			if r1.Status < 400 {
				t.Fatalf("got %d on org B's resource: %s", r1.Status, r1.Body)
			}
			r2 := a.Do(rt.Method, fake, body(rt.Method, rt.Path, uid))
			if r1.Status != r2.Status || r1.ErrorCode() != r2.ErrorCode() {
				t.Fatalf("existence leak: real id -> %d %s, missing id -> %d %s", r1.Status, r1.ErrorCode(), r2.Status, r2.ErrorCode())
			}
		})
	}
}

// A project viewer can read its project but change nothing anywhere.
func TestProjectViewerCannotChangeAnything(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		f := newTenancy(t, d)
		uid, v := f.s.NewUser(f.admin, "viewer@example.com")
		f.admin.Do("POST", "/api/v1/projects/"+f.projA+"/members", map[string]string{"user_id": uid, "role": "project_viewer"}).Want(t, 201)
		v.Do("GET", "/api/v1/projects/"+f.projA, nil).Want(t, 200)
		before := successAudits(t, f.s)
		for _, rt := range f.s.App.API.Routes() {
			if rt.Public || rt.Method == http.MethodGet {
				continue
			}
			t.Run(rt.Method+" "+rt.Path, func(t *testing.T) {
				r := v.Do(rt.Method, fill(rt.Path, map[string]string{"org_id": f.orgA, "project_id": f.projA}), body(rt.Method, rt.Path, uid))
				if r.Status < 400 {
					t.Fatalf("viewer changed something: %d %s", r.Status, r.Body)
				}
			})
		}
		if after := successAudits(t, f.s); after != before {
			t.Fatalf("viewer's attempts wrote %d success audit rows", after-before)
		}
		// The refused privileged attempts are audited as denied.
		evs, _, err := f.s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{ActorID: uid, Outcome: "denied"}, store.Page{Limit: 500})
		if err != nil || len(evs) == 0 {
			t.Fatalf("no denied audit rows for the viewer (%v)", err)
		}
	})
}

func successAudits(t *testing.T, s *servertest.Server) int {
	t.Helper()
	n := 0
	cursor := ""
	for {
		evs, next, err := s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{Outcome: "success"}, store.Page{Limit: 500, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		n += len(evs)
		if next == "" {
			return n
		}
		cursor = next
	}
}
