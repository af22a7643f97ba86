package console

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
)

// A shared instance (control_plane_scope tenant) lives in its home
// project, and a member of a project attached to it reads it, and opens
// its UI, through that attached project; through the home project the API
// answers that member not found. The console's instance page, asked by
// instance id, reads it through the project the person works in when the
// home project refuses: the page shows it, its live stream is the attached
// project's, and Open app mints through the attached project. An instance
// read through neither stays not found.
func TestASharedInstanceShowsThroughAnAttachedProject(t *testing.T) {
	var opened, lookups atomic.Int32
	// Read through the session's project, a page needs no lookup of the
	// instance's attachments.
	attachedTo := func(context.Context, string) ([]iam.Scope, error) { lookups.Add(1); return nil, nil }
	// The API as the member of project "att" sees it: nothing through
	// "home" (the default answer, 404), the instance through "att".
	c := sharedInstanceConsole(t, "att", `[{"id":"att","org_id":"o1","slug":"team-b"}]`, &iam.Grants{}, attachedTo, map[string]http.HandlerFunc{
		"GET /api/v1/projects/att/app-instances/i1": reply(sharedInstance),
		"POST /api/v1/projects/att/app-instances/i1/ui-open": func(w http.ResponseWriter, r *http.Request) {
			opened.Add(1)
			reply(`{"url":"http://i1.apps.example/__gpuaas/open?code=one-time"}`)(w, r)
		},
	})

	rec := get(c, "/workloads/instance/i1", nil)
	if body := rec.Body.String(); rec.Code != http.StatusOK || !strings.Contains(body, "shared notebook") {
		t.Fatalf("the shared instance's page through the attached project: %d\n%s", rec.Code, body)
	}
	if body := rec.Body.String(); !strings.Contains(body, `data-live="att"`) {
		t.Errorf("the page's live stream is not the attached project's:\n%s", body)
	}
	if rec := get(c, "/workloads/instance/i1?fragment=1", nil); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "shared notebook") {
		t.Errorf("the page's fragment: %d", rec.Code)
	}
	rec = get(c, "/workloads/instance/i1/open", map[string]string{"Sec-Fetch-Site": "same-origin"})
	if loc := rec.Header().Get("Location"); rec.Code != http.StatusSeeOther || !strings.HasPrefix(loc, "http://i1.apps.example/") || opened.Load() != 1 {
		t.Errorf("Open app through the attached project: %d %q, %d codes minted", rec.Code, loc, opened.Load())
	}
	if rec := get(c, "/workloads/instance/i1/open", map[string]string{"Sec-Fetch-Site": "cross-site"}); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "shared notebook") {
		t.Errorf("the Open app page of a foreign link: %d", rec.Code)
	}
	if n := lookups.Load(); n != 0 {
		t.Errorf("pages read through the session's project looked up the attachments %d times", n)
	}
	// Read through neither project: not found.
	if rec := get(c, "/workloads/instance/i2", nil); rec.Code != http.StatusNotFound {
		t.Errorf("an instance of neither project: %d, want 404", rec.Code)
	}
}

// sharedInstance is a tenant-shared instance of home project "home", as
// the API answers it through a project attached to it.
const sharedInstance = `{"id":"i1","org_id":"o1","project_id":"home","display_name":"shared notebook","status":"running","control_plane_scope":"tenant"}`

// sharedInstanceConsole is the console of person u1 of org o1 (whose
// projects are the JSON array projects), signed in and working in project,
// with grants g, in front of an API that answers routes besides who u1 is
// and which orgs and projects u1 sees. Instances' own project, as the
// server finds it, is "home"; attachedTo is Config.AttachedTo.
func sharedInstanceConsole(t *testing.T, project, projects string, g *iam.Grants,
	attachedTo func(context.Context, string) ([]iam.Scope, error), routes map[string]http.HandlerFunc) *Console {
	t.Helper()
	now := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	routes["GET /api/v1/me"] = reply(`{"id":"u1","type":"user","email":"b@example.com"}`)
	routes["GET /api/v1/orgs"] = reply(`{"items":[{"id":"o1","slug":"acme"}]}`)
	routes["GET /api/v1/orgs/o1/projects"] = reply(`{"items":` + projects + `}`)
	sessions := oneSession(ConsoleSession{UserID: "u1", CSRFToken: "csrf", ProjectID: project, CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(time.Hour)})
	c, err := New(Config{API: fakeAPI(routes), Sessions: sessions, PublicURL: func() string { return "http://x" }, Now: func() time.Time { return now },
		Mint:       func(context.Context, string) (string, time.Time, error) { return "tok", now.Add(time.Hour), nil },
		Grants:     func(context.Context, string) (*iam.Grants, error) { return g, nil },
		ProjectOf:  func(context.Context, string) (string, error) { return "home", nil },
		AttachedTo: attachedTo})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type bindingsOf []iam.RoleBinding

func (b bindingsOf) BindingsOfPrincipal(context.Context, string, string) ([]iam.RoleBinding, error) {
	return b, nil
}

// A link to a shared instance opens through whichever attached project the
// person reads it in, not only through the one the session is in: here
// the session is in a project the instance is not attached to, and of the
// two attached projects the person is a member of one. The console does
// not knock at the attached project the person holds no role in.
func TestASharedInstanceOpensThroughAnyAttachedProjectThePersonReads(t *testing.T) {
	var knocked atomic.Int32
	g, err := iam.LoadGrants(context.Background(), bindingsOf{
		{Role: iam.RoleProjectMember, ScopeType: iam.ScopeProject, ScopeID: "mine", OrgID: "o1"},
		{Role: iam.RoleProjectViewer, ScopeType: iam.ScopeProject, ScopeID: "att2", OrgID: "o1"},
	}, principal.Principal{Type: principal.User, ID: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	attachedTo := func(_ context.Context, id string) ([]iam.Scope, error) {
		if id != "i1" {
			return nil, nil
		}
		return []iam.Scope{{OrgID: "o1", ProjectID: "att"}, {OrgID: "o1", ProjectID: "att2"}}, nil
	}
	c := sharedInstanceConsole(t, "mine", `[{"id":"mine","org_id":"o1","slug":"team-a"},{"id":"att2","org_id":"o1","slug":"team-b"}]`, g, attachedTo,
		map[string]http.HandlerFunc{
			"GET /api/v1/projects/att2/app-instances/i1": reply(sharedInstance),
			"GET /api/v1/projects/att/app-instances/i1": func(w http.ResponseWriter, r *http.Request) {
				knocked.Add(1)
				http.NotFound(w, r)
			},
		})

	rec := get(c, "/workloads/instance/i1", nil)
	if body := rec.Body.String(); rec.Code != http.StatusOK || !strings.Contains(body, "shared notebook") || !strings.Contains(body, `data-live="att2"`) {
		t.Fatalf("the shared instance's page, session in another project: %d\n%s", rec.Code, body)
	}
	if n := knocked.Load(); n != 0 {
		t.Errorf("the console asked the API %d times through an attached project the person holds no role in", n)
	}
	if rec := get(c, "/workloads/instance/i2", nil); rec.Code != http.StatusNotFound {
		t.Errorf("an instance attached nowhere the person reads: %d, want 404", rec.Code)
	}
}
