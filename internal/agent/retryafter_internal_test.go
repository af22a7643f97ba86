package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
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
