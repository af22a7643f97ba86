package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
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
	csrf := regexp.MustCompile(`name="csrf_token" value="([^"]+)"`).FindStringSubmatch(fetch(t, s.URL+"/projects", session))[1]
	// RoundTrip, not a client: the client refuses such a Location before
	// a test could look at it.
	location := func(req *http.Request) string {
		t.Helper()
		req.AddCookie(session)
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%s %s: %d, want a redirect", req.Method, req.URL, resp.StatusCode)
		}
		return resp.Header.Get("Location")
	}
	for _, next := range []string{"/\t/evil.example", "/\n/evil.example", "//evil.example", `/\evil.example`, "https://evil.example/"} {
		// Signed in already, /login sends the person on to next.
		req, _ := http.NewRequest("GET", s.URL+"/login?"+url.Values{"next": {next}}.Encode(), nil)
		if loc := location(req); loc != "/" {
			t.Errorf("GET /login next=%q → %q, want /", next, loc)
		}
		req, _ = http.NewRequest("POST", s.URL+"/projects/select", strings.NewReader(url.Values{"project_id": {s.Creds.ProjectID},
			"csrf_token": {csrf}, "next": {next}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if loc := location(req); loc != "/" {
			t.Errorf("POST /projects/select next=%q → %q, want /", next, loc)
		}
	}
	// A path on the console goes through as it is.
	req, _ := http.NewRequest("GET", s.URL+"/login?next=%2Fworkloads%3Fstatus%3Drunning", nil)
	if loc := location(req); loc != "/workloads?status=running" {
		t.Errorf("GET /login next=/workloads?status=running → %q", loc)
	}
}
