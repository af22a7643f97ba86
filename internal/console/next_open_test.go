package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// The next variants a browser (or Go's redirect and router) turns into
// "Open app": dot segments plain or percent-encoded, repeated slashes, a
// fragment Go's redirect would clean as a path, a trailing space Go drops
// from a Location. opens: the browser ends up on the open address.
var openNexts = []struct {
	next  string
	opens bool
}{
	{"/workloads/instance/i1/open?path=%2Fui%2F", true},
	{"/workloads/instance/i1/./open?path=%2Fui%2F", true},
	{"/workloads//instance/i1/open?path=%2Fui%2F", true},
	{"/workloads/instance/i1/%2e/open?path=%2Fui%2F", true},
	{"/workloads/instance/i1/%2E/open", true},
	{"/workloads/instance/x/%2e%2e/i1/open?path=%2Fui%2F", true},
	{"/workloads/instance/x/.%2E/i1//open", true},
	{"/workloads/instance/i1/%6Fpen", true},
	{"/workloads/instance/i1/opex#/../open", false},
	{"/workloads/instance/i1/open ", false},
	{"/workloads/instance/i1/open/.", false},
}

// follow goes where a browser on https://console.example goes when told
// loc, the console's redirects included, as same-origin navigations (they
// follow the console's own answer), with session; it returns the last
// answer (the console's page, or its redirect off the console).
func follow(t *testing.T, c *Console, loc string, session *http.Cookie) *httptest.ResponseRecorder {
	t.Helper()
	for range 5 {
		// What reaches the browser is on the wire: Go trims the header's
		// value. The browser resolves dot segments, "%2e" as ".".
		loc = strings.TrimSpace(loc)
		u, err := url.Parse(loc)
		if err != nil {
			t.Fatalf("Location %q: %v", loc, err)
		}
		if u.Host != "" {
			t.Fatalf("Location %q leaves the console", loc)
		}
		segs := strings.Split(u.EscapedPath(), "/")
		for i, s := range segs {
			switch strings.ToLower(s) {
			case "%2e":
				segs[i] = "."
			case ".%2e", "%2e.", "%2e%2e":
				segs[i] = ".."
			}
		}
		ref := &url.URL{Path: strings.Join(segs, "/"), RawQuery: u.RawQuery}
		if p, err := url.PathUnescape(ref.Path); err == nil {
			ref.RawPath, ref.Path = ref.Path, p
		}
		base, _ := url.Parse("https://console.example/login")
		target := base.ResolveReference(ref)
		req := httptest.NewRequest("GET", target.String(), nil)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.AddCookie(session)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		next := rec.Header().Get("Location")
		if rec.Code/100 != 3 || strings.HasPrefix(next, "http") {
			return rec
		}
		loc = next
	}
	t.Fatalf("redirected too often, last to %q", loc)
	return nil
}

// withLogin lets c's stand-in API answer a sign-in.
func withLogin(c *Console) {
	api := c.cfg.API
	c.cfg.API = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/auth/login" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"access_token":"t","token_type":"Bearer","expires_in":900}`)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// checkAsked: following loc opens no app; where it reaches the open
// address, it is the page asking first.
func checkAsked(t *testing.T, c *Console, loc string, session *http.Cookie, opens bool, opened func() int32) {
	t.Helper()
	if opens {
		if u, err := url.Parse(loc); err != nil || u.Query().Get("ask") != "1" {
			t.Errorf("Location %q carries no ask=1", loc)
		}
	}
	rec := follow(t, c, loc, session)
	if n := opened(); n != 0 {
		t.Fatalf("following %q: %d %q, %d codes minted; want no app opened", loc, rec.Code, rec.Header().Get("Location"), n)
	}
	if opens && (rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `action="/workloads/instance/i1/open"`)) {
		t.Fatalf("following %q: %d, want the page asking first:\n%s", loc, rec.Code, rec.Body)
	}
}

// A sign-in (or the switcher, or the sign-in page when signed in) whose
// next leads to "Open app" in any spelling asks first: the redirect is the
// console's own, a same-origin navigation that would otherwise mint a code.
func TestNextThatOpensAnAppAsksFirstInAnySpelling(t *testing.T) {
	for _, tc := range openNexts {
		t.Run(tc.next, func(t *testing.T) {
			t.Run("sign-in", func(t *testing.T) {
				c, _, _, opened := openAppConsole(t, "https://console.example")
				withLogin(c)
				const token = "a-login-csrf-token-of-at-least-32-bytes"
				form := url.Values{"email": {"a@example.com"}, "password": {"pw"}, "csrf_token": {token}, "next": {tc.next}}
				req := httptest.NewRequest("POST", "https://console.example/login", strings.NewReader(form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Sec-Fetch-Site", "same-origin")
				req.AddCookie(&http.Cookie{Name: "__Host-gpuaas_login_csrf", Value: token})
				rec := httptest.NewRecorder()
				c.ServeHTTP(rec, req)
				var session *http.Cookie
				for _, ck := range rec.Result().Cookies() {
					if ck.Name == "__Host-gpuaas_session" {
						session = ck
					}
				}
				if rec.Code != http.StatusSeeOther || session == nil {
					t.Fatalf("sign-in: %d %q", rec.Code, rec.Header().Get("Location"))
				}
				checkAsked(t, c, rec.Header().Get("Location"), session, tc.opens, opened.Load)
			})
			t.Run("signed in already", func(t *testing.T) {
				c, session, _, opened := openAppConsole(t, "https://console.example")
				session.Name = c.cookie(SessionCookie, "/").Name // __Host- over https
				req := httptest.NewRequest("GET", "https://console.example/login?"+url.Values{"next": {tc.next}}.Encode(), nil)
				req.Header.Set("Sec-Fetch-Site", "cross-site")
				req.AddCookie(session)
				rec := httptest.NewRecorder()
				c.ServeHTTP(rec, req)
				if rec.Code != http.StatusSeeOther {
					t.Fatalf("GET /login signed in: %d", rec.Code)
				}
				checkAsked(t, c, rec.Header().Get("Location"), session, tc.opens, opened.Load)
			})
			t.Run("project switcher", func(t *testing.T) {
				c, session, csrf, opened := openAppConsole(t, "https://console.example")
				session.Name = c.cookie(SessionCookie, "/").Name
				c.cfg.API = func(api http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.Method == "GET" && r.URL.Path == "/api/v1/projects/p1" {
							w.Header().Set("Content-Type", "application/json")
							_, _ = io.WriteString(w, `{"id":"p1","org_id":"o1","name":"p"}`)
							return
						}
						api.ServeHTTP(w, r)
					})
				}(c.cfg.API)
				form := url.Values{"project_id": {"p1"}, "csrf_token": {csrf}, "next": {tc.next}}
				req := httptest.NewRequest("POST", "https://console.example/projects/select", strings.NewReader(form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Sec-Fetch-Site", "same-origin")
				req.AddCookie(session)
				rec := httptest.NewRecorder()
				c.ServeHTTP(rec, req)
				if rec.Code != http.StatusSeeOther {
					t.Fatalf("POST /projects/select: %d\n%s", rec.Code, rec.Body)
				}
				checkAsked(t, c, rec.Header().Get("Location"), session, tc.opens, opened.Load)
			})
		})
	}
}
