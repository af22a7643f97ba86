package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// A stream started from "now" resumes, after a reconnect before any event,
// from the sequence its opening named, not from a later "now".
func TestFollowEventsResumesFromOpening(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Header.Get("Last-Event-ID"))
		n := len(asked)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		if n == 1 { // the opening, then the connection drops
			fmt.Fprint(w, "retry: 1000\nid: 41\n: stream after 41\n\n")
			return
		}
		fmt.Fprint(w, "retry: 1000\nid: 41\n: stream after 41\n\nid: 42\nevent: a.b\ndata: {\"id\":\"e42\",\"sequence\":42}\n\n")
	}))
	defer srv.Close()
	stop := errors.New("stop")
	var got []int64
	err := New(srv.URL, "t").FollowEvents(context.Background(), "/p", EventFilter{}, ResumeNow, func(e Event) error {
		got = append(got, e.Sequence)
		return stop
	})
	if !errors.Is(err, stop) || len(got) != 1 || got[0] != 42 {
		t.Fatalf("events %v, err %v", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || asked[0] != ResumeNow || asked[1] != "41" {
		t.Fatalf("Last-Event-ID sent: %q", asked)
	}
}

// A stream refused with 503 or 429 is asked for again no sooner than the
// answer's Retry-After (the follower's own backoff starts at 100 ms), at
// most the retry policy's MaxWait; then it reads the events.
func TestFollowEventsWaitsOutRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		retryAfter string
		policy     *RetryPolicy
		want       time.Duration
	}{
		{"503", http.StatusServiceUnavailable, "2", nil, 2 * time.Second},
		{"429", http.StatusTooManyRequests, "3", nil, 3 * time.Second},
		{"capped by default", http.StatusServiceUnavailable, "3600", nil, defaultMaxRetryWait},
		{"capped by the policy", http.StatusServiceUnavailable, "3600", &RetryPolicy{MaxWait: 5 * time.Second}, 5 * time.Second},
		{"without one", http.StatusServiceUnavailable, "", nil, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			connects := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				connects++
				n := connects
				mu.Unlock()
				if n == 1 {
					if tc.retryAfter != "" {
						w.Header().Set("Retry-After", tc.retryAfter)
					}
					w.WriteHeader(tc.status)
					fmt.Fprint(w, `{"error":{"code":"not_now","message":"not now","correlation_id":"c1"}}`)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "id: 7\ndata: {\"id\":\"e7\",\"sequence\":7}\n\n")
			}))
			defer srv.Close()
			c := New(srv.URL, "t")
			c.Retry = tc.policy
			var waits []time.Duration
			c.sleep = func(_ context.Context, d time.Duration) error {
				mu.Lock()
				defer mu.Unlock()
				if connects != 1 {
					t.Errorf("waited %v after connect %d", d, connects)
				}
				waits = append(waits, d)
				return nil
			}
			stop := errors.New("stop")
			var got []int64
			err := c.FollowEvents(t.Context(), "/p", EventFilter{}, "", func(e Event) error {
				got = append(got, e.Sequence)
				return stop
			})
			if !errors.Is(err, stop) || len(got) != 1 || got[0] != 7 {
				t.Fatalf("events %v, err %v", got, err)
			}
			if len(waits) != 1 || waits[0] != tc.want {
				t.Fatalf("waits %v, want [%v]", waits, tc.want)
			}
		})
	}
}

// A context that ends during a Retry-After wait ends the follower then.
func TestFollowEventsRetryAfterWaitEndsWithTheContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	err := New(srv.URL, "t").FollowEvents(ctx, "/p", EventFilter{}, "", func(Event) error { return nil })
	if took := time.Since(start); err != nil || took > 5*time.Second {
		t.Fatalf("returned %v after %v", err, took)
	}
}
