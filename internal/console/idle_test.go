package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/wakeup"
)

// idleConsole is a console over a stand-in API with one instance (i1 in
// p1) and a session (cookie "cookie") last used at clk's time, idling out
// after 30 minutes; streamOpen, when not nil, receives a value when the
// API's event stream is opened, which then lasts until the console drops
// it.
func idleConsole(t *testing.T, clk *clock.Manual, wake *wakeup.Hub, streamOpen chan<- struct{}) (*Console, *memSessions) {
	t.Helper()
	now := clk.Now()
	api := fakeAPI(map[string]http.HandlerFunc{
		"GET /api/v1/me":                           reply(`{"id":"u1","type":"user","email":"a@example.com"}`),
		"GET /api/v1/orgs":                         reply(`{"items":[]}`),
		"GET /api/v1/projects/p1":                  reply(`{"id":"p1","org_id":"o1","slug":"web"}`),
		"GET /api/v1/projects/p1/app-instances/i1": reply(`{"id":"i1","project_id":"p1","display_name":"notebook","status":"running"}`),
		"GET /api/v1/projects/p1/events/stream": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			if streamOpen != nil {
				streamOpen <- struct{}{}
				<-r.Context().Done()
			}
		},
	})
	sessions := oneSession(ConsoleSession{UserID: "u1", CSRFToken: "csrf", ProjectID: "p1", CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(12 * time.Hour)})
	c, err := New(Config{API: api, Sessions: sessions, PublicURL: func() string { return "http://x" }, Now: clk.Now, Wake: wake,
		IdleTimeout: 30 * time.Minute, MaxAge: 12 * time.Hour,
		Mint:      func(context.Context, string) (string, time.Time, error) { return "tok", clk.Now().Add(time.Hour), nil },
		Grants:    func(context.Context, string) (*iam.Grants, error) { return &iam.Grants{}, nil },
		ProjectOf: func(context.Context, string) (string, error) { return "p1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	return c, sessions
}

// get serves a GET of path with the session cookie and headers.
func get(c *Console, path string, headers map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: "cookie"})
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	return rec
}

// Only what the person does keeps a session from idling out: a page
// opened, a form posted. What an open page's live-update script asks for
// on its own (its event stream, the fragments it refetches on an event, any
// other fetch) is served while the session lives, but does not extend it:
// a tab left open idles out like any other. Once it has, the script's
// requests answer 401 (the script shows the person signed out), not a
// redirect to a sign-in page it could not show.
func TestOnlyThePersonKeepsASessionFromIdlingOut(t *testing.T) {
	const page = "/workloads/instance/i1"
	for _, tc := range []struct {
		name    string
		path    string
		headers map[string]string
		person  bool
	}{
		{"a page opened, no fetch metadata", page, nil, true},
		{"a page opened", page, map[string]string{"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, true},
		{"the script's fragment", page + "?fragment=1", nil, false},
		{"the script's fragment, with fetch metadata", page + "?fragment=1", map[string]string{"Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}, false},
		{"the script's event stream", "/events/stream?project=p1", map[string]string{"Accept": "text/event-stream"}, false},
		{"another fetch of a script", page, map[string]string{"Sec-Fetch-Mode": "same-origin", "Sec-Fetch-Dest": "empty"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewManual(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC))
			start := clk.Now()
			c, sessions := idleConsole(t, clk, nil, nil)
			// Every 10 minutes for 50 minutes; the person looked last at start.
			for i := 1; i <= 5; i++ {
				clk.Advance(10 * time.Minute)
				rec := get(c, tc.path, tc.headers)
				s, _ := sessions.GetConsoleSession(context.Background(), hashID("cookie"))
				alive := tc.person || i < 3
				switch {
				case alive && rec.Code != http.StatusOK:
					t.Fatalf("after %d min: %d, want it served\n%s", 10*i, rec.Code, rec.Body)
				case !alive && rec.Code != http.StatusUnauthorized:
					t.Fatalf("after %d min, idle since the start: %d %q, want 401 (signed out)", 10*i, rec.Code, rec.Header().Get("Location"))
				case !tc.person && !s.LastSeenAt.Equal(start):
					t.Fatalf("after %d min: the request moved the session's last use to %v", 10*i, s.LastSeenAt.Sub(start))
				}
			}
			if !tc.person {
				// The person, back at the page, is asked to sign in.
				if rec := get(c, page, nil); rec.Code != http.StatusSeeOther || !strings.HasPrefix(rec.Header().Get("Location"), "/login") {
					t.Errorf("a page opened after the idle expiry: %d %q, want the sign-in page", rec.Code, rec.Header().Get("Location"))
				}
			}
		})
	}
}

// An open page's event stream ends when its session idles out, though the
// page kept refetching what the stream's events were about: those
// refetches are no use of the session by the person.
func TestAnOpenLivePageLetsItsSessionIdleOut(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC))
	wake := wakeup.New()
	opened := make(chan struct{}, 1)
	c, _ := idleConsole(t, clk, wake, opened)

	ended := make(chan int, 1)
	go func() { ended <- get(c, "/events/stream?project=p1", nil).Code }()
	select {
	case <-opened:
	case <-time.After(10 * time.Second):
		t.Fatal("the event stream did not open")
	}
	// Events keep coming; the page re-renders on each.
	for range 2 {
		clk.Advance(10 * time.Minute)
		if rec := get(c, "/workloads/instance/i1?fragment=1", nil); rec.Code != http.StatusOK {
			t.Fatalf("a fragment while the session lives: %d", rec.Code)
		}
		wake.Notify(wakeup.ConsoleSessionEnded) // the stream looks again
	}
	select {
	case <-ended:
		t.Fatal("the event stream ended while its session lived")
	default:
	}
	// 30 minutes after the person's last request.
	clk.Advance(10 * time.Minute)
	wake.Notify(wakeup.ConsoleSessionEnded) // or the stream's own recheck, 30 s on
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the event stream of a session idle for 30 minutes (but for the page's own refetches) is still open")
	}
	if rec := get(c, "/events/stream?project=p1", nil); rec.Code != http.StatusUnauthorized {
		t.Errorf("the stream's reconnect after the idle expiry: %d, want 401", rec.Code)
	}
}
