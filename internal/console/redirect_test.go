package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// The pages that redirect to a "next" the request names keep it on the
// console, whatever it hides: a browser drops tabs and line breaks from a
// Location and reads "/<TAB>/evil.example" as "//evil.example".
func TestNextStaysOnTheConsole(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	session := consoleSession(t, s)
	csrf := csrfOf(t, fetch(t, s.URL+"/projects", session))
	location := func(resp *http.Response) string {
		t.Helper()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%s %s: %d, want a redirect", resp.Request.Method, resp.Request.URL, resp.StatusCode)
		}
		return resp.Header.Get("Location")
	}
	for _, next := range []string{"/\t/evil.example", "/\n/evil.example", "//evil.example", `/\evil.example`, "https://evil.example/"} {
		// Signed in already, /login sends the person on to next.
		req, _ := http.NewRequest("GET", s.URL+"/login?"+url.Values{"next": {next}}.Encode(), nil)
		if loc := location(answer(t, req, session)); loc != "/" {
			t.Errorf("GET /login next=%q → %q, want /", next, loc)
		}
		form := url.Values{"project_id": {s.Creds.ProjectID}, "csrf_token": {csrf}, "next": {next}}
		if loc := location(postForm(t, s, "/projects/select", form, session)); loc != "/" {
			t.Errorf("POST /projects/select next=%q → %q, want /", next, loc)
		}
	}
	// A path on the console goes through as it is.
	req, _ := http.NewRequest("GET", s.URL+"/login?next=%2Fworkloads%3Fstatus%3Drunning", nil)
	if loc := location(answer(t, req, session)); loc != "/workloads?status=running" {
		t.Errorf("GET /login next=/workloads?status=running → %q", loc)
	}
}
