package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
	"github.com/gpuaas/gpuaas/internal/agent/driver/drivertest"
)

// limitingServer answers every request 429 with Retry-After: 20, as a
// server that limits this node's requests does.
func limitingServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "20")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"code":"node_requests_rate_limited","message":"slow down","details":{"retry_after_seconds":20}}}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A refused heartbeat waits at least the server's Retry-After before the
// next beat, instead of the usual second or two.
func TestHeartbeatHonoursRetryAfter(t *testing.T) {
	srv := limitingServer(t)
	a := newFakeAgent(t, &drivertest.Fake{}, func(c *Config) { c.Server = srv.URL })
	a.id = identity{NodeID: "node-1"}
	a.tok = &tokens{api: a.api, id: &a.id, token: "tok", expiry: time.Now().Add(time.Hour)}
	if err := a.heartbeat(context.Background()); err == nil {
		t.Fatal("a refused beat succeeded")
	}
	a.mu.Lock()
	next := time.Until(a.lastBeat.Add(a.interval))
	a.mu.Unlock()
	if next < 19*time.Second {
		t.Fatalf("next beat in %v after a 429 with Retry-After: 20", next)
	}
}

// A refused poll and a refused result wait at least the Retry-After; other
// failures keep their own back-off, and a Retry-After is capped.
func TestPollAndResultsHonourRetryAfter(t *testing.T) {
	srv := limitingServer(t)
	c := client.New(srv.URL, "tok")
	_, err := c.PollNodeTasks(context.Background(), "node-1", 0)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.RetryAfter != 20*time.Second {
		t.Fatalf("the client did not read Retry-After: %#v", err)
	}
	if d := pollBackoff(1, err); d < 20*time.Second {
		t.Fatalf("poll back-off %v after a 429 with Retry-After: 20", d)
	}
	if d := pollBackoff(1, errors.New("connection refused")); d > time.Second {
		t.Fatalf("poll back-off %v after a first transport error", d)
	}
	if d := retryAfter(&client.APIError{Status: http.StatusBadRequest, RetryAfter: time.Hour}); d != 0 {
		t.Fatalf("a 400's Retry-After was honoured: %v", d)
	}
	if d := retryAfter(&client.APIError{Status: http.StatusTooManyRequests, RetryAfter: time.Hour}); d != maxRetryAfter {
		t.Fatalf("an hour's Retry-After: wait %v, want the cap %v", d, maxRetryAfter)
	}
}

// An unwrap refused with 429 consumed nothing: the agent sends the same
// token again after the Retry-After, and the pull goes on, instead of
// failing its task as if the credentials were refused.
func TestUnwrapWaitsOutARateLimit(t *testing.T) {
	var mu sync.Mutex // the handler's goroutine writes, the test reads
	var seen []time.Time
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := wrappingToken(r)
		mu.Lock()
		defer mu.Unlock()
		seen, sent = append(seen, time.Now()), append(sent, tok)
		w.Header().Set("Content-Type", "application/json")
		if len(seen) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"code":"unwrap_rate_limited","message":"slow down"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"username":"u","password":"p","registry":"reg.example","repository":"r","actions":["pull"],"expires_at":"2030-01-01T00:00:00Z"}`)
	}))
	t.Cleanup(srv.Close)
	a := newFakeAgent(t, &drivertest.Fake{}, func(c *Config) { c.Server = srv.URL })
	a.id = identity{NodeID: "node-1"}
	a.tok = &tokens{api: a.api, id: &a.id, token: "tok", expiry: time.Now().Add(time.Hour)}
	cr, err := a.unwrap(context.Background(), "gpw_1")
	if err != nil || cr.Username != "u" {
		t.Fatalf("unwrap after a 429: %+v %v", cr, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || sent[1] != "gpw_1" {
		t.Fatalf("unwraps %v", sent)
	}
	if waited := seen[1].Sub(seen[0]); waited < time.Second {
		t.Fatalf("sent again %v after a 429 with Retry-After: 1", waited)
	}
}

// A node whose unwraps are refused 429 for longer than a few Retry-Afters
// keeps sending the same token, each time after the Retry-After, until its
// patience runs out (the last wait cut to what is left of it, and one more
// try then); then the pull fails as image_pull_failed (try again),
// never as credential_refused, which would send a person after a
// credential fault that is not there. The clock is moved, not slept.
func TestUnwrapWaitsOutALongRateLimitThenFailsThePull(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := wrappingToken(r)
		mu.Lock()
		sent = append(sent, tok)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"code":"unwrap_rate_limited","message":"slow down"}}`)
	}))
	t.Cleanup(srv.Close)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	start := now
	a := newFakeAgent(t, &drivertest.Fake{}, func(c *Config) {
		c.Server = srv.URL
		c.Now = func() time.Time { return now } // only this goroutine moves it
	})
	var waits []time.Duration
	a.wait = func(_ context.Context, d time.Duration) bool {
		waits = append(waits, d)
		now = now.Add(d)
		return true
	}
	a.id = identity{NodeID: "node-1"}
	a.tok = &tokens{api: a.api, id: &a.id, token: "tok", expiry: time.Now().Add(time.Hour)}

	_, err := a.unwrap(context.Background(), "gpw_1")
	f := driver.AsFailure(err)
	if f == nil || f.Reason != nodeapi.ReasonImagePullFailed {
		t.Fatalf("unwrap refused 429 past its patience: %v, want a %s failure", err, nodeapi.ReasonImagePullFailed)
	}
	// The last wait is what was left of the patience, so the last try goes
	// at its end, inside the wrapping token's 5 minutes.
	if waited := now.Sub(start); waited != unwrapPatience {
		t.Fatalf("gave up after waiting %v, want the last try at %v", waited, unwrapPatience)
	}
	for i, d := range waits {
		if d > time.Second+250*time.Millisecond || d < time.Second && i < len(waits)-1 {
			t.Fatalf("waited %v after a 429 with Retry-After: 1 (waits %v)", d, waits)
		}
	}
	mu.Lock()
	got := append([]string(nil), sent...)
	mu.Unlock()
	if len(got) != len(waits)+1 || len(got) < 90 {
		t.Fatalf("%d unwraps for %d waits; want one per wait and one more, about one a second", len(got), len(waits))
	}
	for _, s := range got {
		if s != "gpw_1" {
			t.Fatalf("sent %q, want the same token each time", s)
		}
	}

	// The task's end stops the waiting early, still not as refused credentials.
	ctx, cancel := context.WithCancel(context.Background())
	a.wait = func(context.Context, time.Duration) bool { cancel(); return false }
	_, err = a.unwrap(ctx, "gpw_2")
	if f := driver.AsFailure(err); f.Reason != nodeapi.ReasonImagePullFailed {
		t.Fatalf("unwrap whose task ended while it waited: %v, want a %s failure", err, nodeapi.ReasonImagePullFailed)
	}
}

// wrappingToken is the token an unwrap request sends.
func wrappingToken(r *http.Request) string {
	var in struct {
		WrappingToken string `json:"wrapping_token"`
	}
	_ = json.NewDecoder(r.Body).Decode(&in)
	return in.WrappingToken
}
