package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
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
