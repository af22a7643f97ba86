package console

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
)

type bindings []iam.RoleBinding

func (b bindings) BindingsOfPrincipal(context.Context, string, string) ([]iam.RoleBinding, error) {
	return b, nil
}

// A person whose role in the project cannot launch (project_viewer) is
// offered no launch: the catalog links each version to the app's page,
// and the launch page says why instead of a wizard whose preview and
// Launch button the API refuses. One who may launch gets both.
func TestLaunchIsOfferedOnlyToThoseWhoMayLaunch(t *testing.T) {
	for _, role := range []string{iam.RoleProjectViewer, iam.RoleProjectMember} {
		t.Run(role, func(t *testing.T) {
			now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
			var previews atomic.Int32
			api := fakeAPI(map[string]http.HandlerFunc{
				"GET /api/v1/me":                       reply(`{"id":"u1","type":"user","email":"a@example.com"}`),
				"GET /api/v1/orgs":                     reply(`{"items":[{"id":"o1","slug":"acme"}]}`),
				"GET /api/v1/orgs/o1/projects":         reply(`{"items":[{"id":"p1","org_id":"o1","slug":"web"}]}`),
				"GET /api/v1/projects/p1/apps/catalog": reply(`{"items":[{"app":{"slug":"nb","display_name":"Notebook"},"versions":[{"app_slug":"nb","version":"1.0.0","status":"published","manifest":{"version":"1.0.0"}}]}]}`),
				"POST /api/v1/projects/p1/apps/catalog/nb/versions/1.0.0/launch-preview": func(w http.ResponseWriter, _ *http.Request) {
					previews.Add(1)
					if role == iam.RoleProjectViewer {
						w.WriteHeader(http.StatusForbidden)
						_, _ = io.WriteString(w, `{"code":"permission_denied","message":"missing apps.instance.create"}`)
						return
					}
					_, _ = io.WriteString(w, `{"operating_mode":"tenant_dedicated","control_plane_scope":"project"}`)
				},
			})
			sessions := oneSession(ConsoleSession{UserID: "u1", CSRFToken: "csrf", ProjectID: "p1", CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(time.Hour)})
			grants := bindings{{PrincipalType: "user", PrincipalID: "u1", Role: role, ScopeType: iam.ScopeProject, ScopeID: "p1", OrgID: "o1"}}
			c, err := New(Config{API: api, Sessions: sessions, PublicURL: func() string { return "http://x" }, Now: func() time.Time { return now },
				Mint: func(context.Context, string) (string, time.Time, error) { return "tok", now.Add(time.Hour), nil },
				Grants: func(ctx context.Context, id string) (*iam.Grants, error) {
					return iam.LoadGrants(ctx, grants, principal.Principal{Type: principal.User, ID: id})
				}})
			if err != nil {
				t.Fatal(err)
			}
			get := func(path string) *httptest.ResponseRecorder {
				req := httptest.NewRequest("GET", path, nil)
				req.AddCookie(&http.Cookie{Name: SessionCookie, Value: "cookie"})
				rec := httptest.NewRecorder()
				c.ServeHTTP(rec, req)
				return rec
			}
			mayLaunch := role != iam.RoleProjectViewer

			catalog := get("/catalog")
			if catalog.Code != http.StatusOK || !strings.Contains(catalog.Body.String(), "Notebook") {
				t.Fatalf("catalog: %d\n%s", catalog.Code, catalog.Body)
			}
			if got := strings.Contains(catalog.Body.String(), `href="/catalog/nb/1.0.0/launch"`); got != mayLaunch {
				t.Errorf("the catalog links the version to its launch: %t, want %t", got, mayLaunch)
			}
			// The navigation offers only pages the person may read: a viewer
			// cannot list service accounts.
			if got := strings.Contains(catalog.Body.String(), `href="/service-accounts"`); got != mayLaunch {
				t.Errorf("the navigation links service accounts: %t, want %t", got, mayLaunch)
			}

			launch := get("/catalog/nb/1.0.0/launch")
			wizard := strings.Contains(launch.Body.String(), `id="launch"`)
			if mayLaunch {
				if launch.Code != http.StatusOK || !wizard {
					t.Errorf("launch page: %d, wizard %t; want the wizard", launch.Code, wizard)
				}
				return
			}
			if launch.Code != http.StatusNotFound || wizard || previews.Load() != 0 || !strings.Contains(launch.Body.String(), "do not allow launching") {
				t.Errorf("launch page for a viewer: %d, wizard %t, %d previews asked; want a page saying why and no wizard\n%s",
					launch.Code, wizard, previews.Load(), launch.Body)
			}
		})
	}
}

// A launch refused after the person chose an allocation (a field error on
// Launch: no preview, so no list of targets) keeps the allocation chosen:
// the form sends it again, and a fixed Launch goes where they chose.
func TestLaunchKeepsTheChosenAllocationOnAnError(t *testing.T) {
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	c.render(rec, httptest.NewRequest("POST", "/catalog/nb/1.0.0/launch", nil), http.StatusUnprocessableEntity, "launch", page{
		Session: &sessionView{CSRF: "t"}, Data: &launchData{App: client.CatalogApp{Slug: "nb"}, Allocation: "alloc-1",
			Problems: map[string]string{"": "bad"}}})
	if body := rec.Body.String(); !strings.Contains(body, `<option value="alloc-1" selected>`) {
		t.Errorf("the chosen allocation is gone from the form:\n%s", body)
	}
}
