package nodes_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// A node's token opens its own node endpoints and nothing else: every other
// route — another node's endpoints, admin reads, project resources — is
// refused (the org list is empty, the registry contract is public), and no
// answer leaks the other node or the project.
func TestNodeTokenOpensOnlyItsOwnEndpoints(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	a := join(t, s, admin, "self", 1)
	b := join(t, s, admin, "other", 1)
	secrets := []string{b.id, s.Creds.OrgID, s.Creds.ProjectID}
	for _, rt := range s.App.API.Routes() {
		if rt.Public {
			continue
		}
		t.Run(rt.Method+" "+rt.Path, func(t *testing.T) {
			path := rt.Path
			for _, seg := range strings.Split(rt.Path, "/") {
				if !strings.HasPrefix(seg, "{") {
					continue
				}
				v := uuid.NewString()
				switch seg {
				case "{node_id}":
					v = b.id
				case "{project_id}":
					v = s.Creds.ProjectID
				case "{org_id}":
					v = s.Creds.OrgID
				}
				path = strings.Replace(path, seg, v, 1)
			}
			var body any
			if rt.Method != http.MethodGet && rt.Method != http.MethodDelete {
				body = map[string]any{}
			}
			r := a.c.Do(rt.Method, path, body)
			if rt.Path == "/api/v1/me" {
				if r.Status != 200 || r.String("type") != "node" || r.String("id") != a.id {
					t.Fatalf("me: %d %s", r.Status, r.Body)
				}
				return
			}
			switch {
			case rt.Path == "/api/v1/apps/registry": // the registry's public contract: where to pull from
			case rt.Path == "/api/v1/orgs" && rt.Method == http.MethodGet:
				if len(r.Items()) != 0 {
					t.Fatalf("node lists orgs: %s", r.Body)
				}
			case r.Status < 400:
				t.Fatalf("node token got %d: %s", r.Status, r.Body)
			}
			for _, sec := range secrets {
				if !strings.Contains(path, sec) && strings.Contains(string(r.Body), sec) {
					t.Fatalf("answer leaks %s: %s", sec, r.Body)
				}
			}
		})
	}
}
