package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/servertest"
)

var csrfField = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// csrfOf is the CSRF token the forms of a console page carry.
func csrfOf(tb testing.TB, page string) string {
	tb.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		tb.Fatal("the page has no form with a CSRF token")
	}
	return m[1]
}

// answer sends req with cookies and follows no redirect (RoundTrip: a
// client refuses some Locations before a test could look at them); the
// body is closed.
func answer(tb testing.TB, req *http.Request, cookies ...*http.Cookie) *http.Response {
	tb.Helper()
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// status is the answer to a GET of path with the session: its status and
// Location.
func status(tb testing.TB, s *servertest.Server, path string, session *http.Cookie) (int, string) {
	tb.Helper()
	req, _ := http.NewRequest("GET", s.URL+path, nil)
	resp := answer(tb, req, session)
	return resp.StatusCode, resp.Header.Get("Location")
}

// postForm posts form to path as a browser does, with cookies.
func postForm(tb testing.TB, s *servertest.Server, path string, form url.Values, cookies ...*http.Cookie) *http.Response {
	tb.Helper()
	req, _ := http.NewRequest("POST", s.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return answer(tb, req, cookies...)
}
