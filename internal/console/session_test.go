package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// memSessions keeps sessions in memory: this tests the console's session
// rules alone (the store's queries have their own test on both dialects).
type memSessions struct {
	mu sync.Mutex
	m  map[string]ConsoleSession
}

func (s *memSessions) InsertConsoleSession(_ context.Context, x ConsoleSession) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[x.IDHash] = x
	return nil
}
func (s *memSessions) GetConsoleSession(_ context.Context, h string) (ConsoleSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.m[h]
	if !ok {
		return x, storage.ErrNotFound
	}
	return x, nil
}
func (s *memSessions) TouchConsoleSession(_ context.Context, h string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.m[h]
	x.LastSeenAt = at
	s.m[h] = x
	return nil
}
func (s *memSessions) SetConsoleSessionProject(context.Context, string, string) error { return nil }
func (s *memSessions) EndConsoleSession(_ context.Context, h string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.m[h]
	x.EndedAt = at
	s.m[h] = x
	return nil
}

func TestSessionsEndWhenIdleAndAtTheirMaxAge(t *testing.T) {
	now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	sessions := &memSessions{m: map[string]ConsoleSession{}}
	c, err := New(Config{API: http.NotFoundHandler(), Sessions: sessions, PublicURL: func() string { return "http://x" },
		IdleTimeout: 30 * time.Minute, MaxAge: 2 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	_ = sessions.InsertConsoleSession(context.Background(), ConsoleSession{IDHash: hashID("cookie"), UserID: "u",
		CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(2 * time.Hour)})
	alive := func() bool {
		r := httptest.NewRequest("GET", "/", nil)
		r.AddCookie(&http.Cookie{Name: SessionCookie, Value: "cookie"})
		_, err := c.session(r)
		return err == nil
	}
	// Used every 20 minutes, it lives on (each use moves last-seen)...
	for i := 0; i < 5; i++ {
		now = now.Add(20 * time.Minute)
		if !alive() {
			t.Fatalf("a session used every 20 minutes ended at use %d", i+1)
		}
	}
	// ...until its absolute end, however busy.
	now = now.Add(20 * time.Minute) // 2 h after sign-in
	if alive() {
		t.Error("a session outlived its max age")
	}
	// Idle past the timeout: over.
	_ = sessions.InsertConsoleSession(context.Background(), ConsoleSession{IDHash: hashID("cookie"), UserID: "u",
		CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(2 * time.Hour)})
	now = now.Add(31 * time.Minute)
	if alive() {
		t.Error("a session idle for 31 minutes is still alive")
	}
	// Signed out: over, whatever the clock says.
	_ = sessions.InsertConsoleSession(context.Background(), ConsoleSession{IDHash: hashID("cookie"), UserID: "u",
		CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(2 * time.Hour)})
	_ = sessions.EndConsoleSession(context.Background(), hashID("cookie"), now)
	if alive() {
		t.Error("a signed-out session is still alive")
	}
}

// The tokens minted for sessions that simply run out (nobody comes back to
// see them end) do not stay in memory: minting drops the expired ones.
func TestExpiredTokensAreDropped(t *testing.T) {
	now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	c, err := New(Config{API: http.NotFoundHandler(), Sessions: &memSessions{m: map[string]ConsoleSession{}}, PublicURL: func() string { return "http://x" },
		Now:  func() time.Time { return now },
		Mint: func(context.Context, string) (string, time.Time, error) { return "tok", now.Add(30 * time.Minute), nil }})
	if err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		c.tokens.Range(func(any, any) bool { n++; return true })
		return n
	}
	for i := range 100 {
		if _, err := c.token(context.Background(), ConsoleSession{IDHash: fmt.Sprint("gone-", i), UserID: "u"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 100 {
		t.Fatalf("%d tokens cached, want 100", n)
	}
	now = now.Add(31 * time.Minute)
	if _, err := c.token(context.Background(), ConsoleSession{IDHash: "new", UserID: "u"}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Errorf("%d tokens cached after the first 100 expired, want only the new one", n)
	}
}

// Behind https the console's cookies carry the __Host- prefix, and only
// those names are read: an app's UI on a sibling subdomain of the same
// site can set a cookie for the parent domain, but not a __Host- one, so it
// cannot plant a session or a sign-in token on the console. Over http
// (no Secure, so no prefix) the plain names serve.
func TestCookiesAreHostOnlyBehindHTTPS(t *testing.T) {
	for _, tc := range []struct {
		url, session, csrf, path string
		secure                   bool
	}{
		{"https://console.example", "__Host-gpuaas_session", "__Host-gpuaas_login_csrf", "/", true},
		{"http://10.0.0.5:8080", "gpuaas_session", "gpuaas_login_csrf", "/login", false},
	} {
		t.Run(tc.url, func(t *testing.T) {
			now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
			sessions := &memSessions{m: map[string]ConsoleSession{}}
			// The API's login and who-am-I, as the console calls them.
			api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch r.URL.Path {
				case "/api/v1/auth/login":
					_, _ = io.WriteString(w, `{"access_token":"t","token_type":"Bearer","expires_in":900}`)
				case "/api/v1/me":
					_, _ = io.WriteString(w, `{"id":"u1","type":"user","email":"a@example.com"}`)
				default:
					http.NotFound(w, r)
				}
			})
			c, err := New(Config{API: api, Sessions: sessions, PublicURL: func() string { return tc.url }, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			want := func(ck *http.Cookie, name, path string) {
				t.Helper()
				if ck == nil || ck.Name != name || ck.Path != path || ck.Secure != tc.secure || !ck.HttpOnly || ck.Domain != "" {
					t.Errorf("cookie %+v, want %s, path %s, Secure %t, HttpOnly, host-only", ck, name, path, tc.secure)
				}
			}
			cookieOf := func(resp *http.Response, name string) *http.Cookie {
				for _, ck := range resp.Cookies() {
					if ck.Name == name {
						return ck
					}
				}
				return nil
			}
			// The sign-in form's token.
			rec := httptest.NewRecorder()
			c.ServeHTTP(rec, httptest.NewRequest("GET", "/login", nil))
			csrf := cookieOf(rec.Result(), tc.csrf)
			want(csrf, tc.csrf, tc.path)
			if csrf == nil {
				return
			}
			// Signing in.
			form := url.Values{"email": {"a@example.com"}, "password": {"pw"}, "csrf_token": {csrf.Value}, "next": {"/"}}
			req := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.AddCookie(csrf)
			rec = httptest.NewRecorder()
			c.ServeHTTP(rec, req)
			session := cookieOf(rec.Result(), tc.session)
			want(session, tc.session, "/")
			if session == nil {
				t.Fatalf("sign-in: %d %v", rec.Code, rec.Result().Header["Set-Cookie"])
			}
			// Only the name the console sets is read.
			for _, name := range []string{"gpuaas_session", "__Host-gpuaas_session"} {
				r := httptest.NewRequest("GET", "/", nil)
				r.AddCookie(&http.Cookie{Name: name, Value: session.Value})
				_, err := c.session(r)
				if ok := err == nil; ok != (name == tc.session) {
					t.Errorf("a session under the name %s is read: %t", name, ok)
				}
			}
			// A sign-in form token under the other name is refused.
			other := "gpuaas_login_csrf"
			if !tc.secure {
				other = "__Host-gpuaas_login_csrf"
			}
			req = httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.AddCookie(&http.Cookie{Name: other, Value: csrf.Value})
			rec = httptest.NewRecorder()
			c.ServeHTTP(rec, req)
			if rec.Code != http.StatusForbidden {
				t.Errorf("sign-in with the form token under %s: %d, want 403", other, rec.Code)
			}
		})
	}
}
