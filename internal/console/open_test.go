package console

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
)

// openAppConsole is a console over a stand-in API with one running
// instance and a signed-in session; opened counts the one-time UI codes
// minted.
func openAppConsole(t *testing.T, publicURL string) (c *Console, session *http.Cookie, csrf string, opened *atomic.Int32) {
	t.Helper()
	now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	opened = &atomic.Int32{}
	api := fakeAPI(map[string]http.HandlerFunc{
		"GET /api/v1/me":                           reply(`{"id":"u1","type":"user","email":"a@example.com"}`),
		"GET /api/v1/orgs":                         reply(`{"items":[]}`),
		"GET /api/v1/projects/p1/app-instances/i1": reply(`{"id":"i1","project_id":"p1","display_name":"notebook","status":"running"}`),
		"POST /api/v1/projects/p1/app-instances/i1/ui-open": func(w http.ResponseWriter, r *http.Request) {
			opened.Add(1)
			reply(`{"url":"http://i1.apps.example/__gpuaas/open?code=one-time"}`)(w, r)
		},
	})
	csrf = "the-sessions-csrf-token"
	sessions := oneSession(ConsoleSession{UserID: "u1", CSRFToken: csrf, CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(time.Hour)})
	c, err := New(Config{API: api, Sessions: sessions, PublicURL: func() string { return publicURL }, Now: func() time.Time { return now },
		Mint:      func(context.Context, string) (string, time.Time, error) { return "tok", now.Add(time.Hour), nil },
		Grants:    func(context.Context, string) (*iam.Grants, error) { return &iam.Grants{}, nil },
		ProjectOf: func(context.Context, string) (string, error) { return "p1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	return c, &http.Cookie{Name: SessionCookie, Value: "cookie"}, csrf, opened
}

// A GET of "Open app" mints a one-time UI code (opening the app as the
// person, audited) only when the console's own page or the person asked
// for it. A link on another site (or on an app's UI, same-site but not the
// console) gets a page whose button, a CSRF-checked form, opens the app:
// SameSite=Lax sends the session cookie with a top-level GET from anywhere.
func TestOpenAppFromAnotherSiteAsksFirst(t *testing.T) {
	const console = "http://10.0.0.5:8080"
	for _, tc := range []struct {
		name    string
		host    string
		headers map[string]string
		mints   bool
	}{
		{"a link on another site", "", map[string]string{"Sec-Fetch-Site": "cross-site"}, false},
		{"a link on an app's UI (same site)", "", map[string]string{"Sec-Fetch-Site": "same-site"}, false},
		{"another site, no fetch metadata (plain http)", "", map[string]string{"Referer": "https://evil.example/page"}, false},
		{"an opaque origin", "", map[string]string{"Origin": "null"}, false},
		{"another origin of the same host", "", map[string]string{"Referer": "https://10.0.0.5:8080/"}, false},
		{"a suppressed Referer on plain http", "", nil, false},
		{"the console's own link", "", map[string]string{"Sec-Fetch-Site": "same-origin", "Referer": console + "/workloads/instance/i1"}, true},
		{"an address typed", "", map[string]string{"Sec-Fetch-Site": "none"}, true},
		{"the console's own link, no fetch metadata (plain http)", "", map[string]string{"Referer": console + "/workloads/instance/i1"}, true},
		{"no browser, to loopback", "127.0.0.1:8080", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, session, csrf, opened := openAppConsole(t, console)
			req := httptest.NewRequest("GET", console+"/workloads/instance/i1/open?path=%2Fui%2Fx", nil)
			if tc.host != "" {
				req.Host = tc.host
			}
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			req.AddCookie(session)
			rec := httptest.NewRecorder()
			c.ServeHTTP(rec, req)
			if tc.mints {
				if rec.Code != http.StatusSeeOther || opened.Load() != 1 || !strings.HasPrefix(rec.Header().Get("Location"), "http://i1.apps.example/__gpuaas/open?") {
					t.Fatalf("%d %q, %d codes minted; want the app opened in one step", rec.Code, rec.Header().Get("Location"), opened.Load())
				}
				return
			}
			body := rec.Body.String()
			if rec.Code != http.StatusOK || opened.Load() != 0 || rec.Header().Get("Location") != "" {
				t.Fatalf("%d %q, %d codes minted; want a page asking first and no code", rec.Code, rec.Header().Get("Location"), opened.Load())
			}
			if !strings.Contains(body, `action="/workloads/instance/i1/open"`) || !strings.Contains(body, `value="`+csrf+`"`) ||
				!strings.Contains(body, `name="path" value="/ui/x"`) {
				t.Fatalf("the page has no CSRF-protected form that opens the app:\n%s", body)
			}
			// The form's answer redirects to the app's origin: the page's
			// form-action lets it.
			if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' http: https:") {
				t.Errorf("CSP %q holds the form's redirect to the app's origin", csp)
			}

			// Without the session's CSRF token, the button opens nothing.
			post := func(form url.Values) *httptest.ResponseRecorder {
				req := httptest.NewRequest("POST", console+"/workloads/instance/i1/open", strings.NewReader(form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.AddCookie(session)
				rec := httptest.NewRecorder()
				c.ServeHTTP(rec, req)
				return rec
			}
			if rec := post(url.Values{"path": {"/ui/x"}}); rec.Code != http.StatusForbidden || opened.Load() != 0 {
				t.Fatalf("the button without a CSRF token: %d, %d codes minted", rec.Code, opened.Load())
			} else if strings.Contains(rec.Body.String(), "javascript:") {
				// The page's own policy (script-src 'self') blocks such a link: it would be dead.
				t.Errorf("the refusal page has a javascript: link:\n%s", rec.Body)
			}
			// Pressed, it opens the app where the link pointed.
			rec = post(url.Values{"csrf_token": {csrf}, "path": {"/ui/x"}})
			loc, _ := url.Parse(rec.Header().Get("Location"))
			if rec.Code != http.StatusSeeOther || opened.Load() != 1 || loc == nil || loc.Host != "i1.apps.example" || loc.Query().Get("path") != "/ui/x" {
				t.Fatalf("the button: %d %q, %d codes minted", rec.Code, rec.Header().Get("Location"), opened.Load())
			}
		})
	}
}

// A signed-out person a link sent to "Open app" signs in first; the
// console's own redirect after the sign-in then carries them there as a
// same-origin navigation, so the console marks it: they are asked, as a
// signed-in person following that link would be.
func TestOpenAppAfterSignInAsksFirst(t *testing.T) {
	c, _, _, opened := openAppConsole(t, "https://console.example")
	c.cfg.API = func(api http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/v1/auth/login" {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"access_token":"t","token_type":"Bearer","expires_in":900}`)
				return
			}
			api.ServeHTTP(w, r)
		})
	}(c.cfg.API)
	const open = "/workloads/instance/i1/open?path=%2Fui%2F"
	// Signed out: to the sign-in, and back.
	req := httptest.NewRequest("GET", "https://console.example"+open, nil)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	login, _ := url.Parse(rec.Header().Get("Location"))
	if rec.Code != http.StatusSeeOther || login == nil || login.Path != "/login" || login.Query().Get("next") != open {
		t.Fatalf("signed out: %d %q", rec.Code, rec.Header().Get("Location"))
	}
	rec = httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest("GET", "https://console.example"+login.RequestURI(), nil))
	var csrf *http.Cookie
	for _, ck := range rec.Result().Cookies() {
		if ck.Name == "__Host-gpuaas_login_csrf" {
			csrf = ck
		}
	}
	if csrf == nil {
		t.Fatalf("the sign-in form set no CSRF cookie: %v", rec.Result().Header["Set-Cookie"])
	}
	form := url.Values{"email": {"a@example.com"}, "password": {"pw"}, "csrf_token": {csrf.Value}, "next": {open}}
	req = httptest.NewRequest("POST", "https://console.example/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(csrf)
	rec = httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	var session *http.Cookie
	for _, ck := range rec.Result().Cookies() {
		if ck.Name == "__Host-gpuaas_session" {
			session = ck
		}
	}
	next := rec.Header().Get("Location")
	if rec.Code != http.StatusSeeOther || session == nil || !strings.HasPrefix(next, "/workloads/instance/i1/open?") {
		t.Fatalf("sign-in: %d %q", rec.Code, next)
	}
	// The console's redirect: a same-origin navigation.
	req = httptest.NewRequest("GET", "https://console.example"+next, nil)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.AddCookie(session)
	rec = httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || opened.Load() != 0 || !strings.Contains(rec.Body.String(), `name="path" value="/ui/"`) {
		t.Fatalf("after the sign-in: %d %q, %d codes minted; want the page asking first", rec.Code, rec.Header().Get("Location"), opened.Load())
	}
}
