package client

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// refusingServer answers each request with the next of answers (the last
// one again once they run out) and records what it was sent.
type refusingServer struct {
	mu      sync.Mutex
	answers []refusal
	got     []seen
}

type refusal struct {
	status     int
	retryAfter string
}

type seen struct {
	method, requestID, key, body string
}

func (s *refusingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.got = append(s.got, seen{r.Method, r.Header.Get("X-Request-ID"), r.Header.Get("X-Idempotency-Key"), string(body)})
	a := s.answers[min(len(s.got), len(s.answers))-1]
	s.mu.Unlock()
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	if a.status >= 400 {
		_, _ = io.WriteString(w, `{"error":{"code":"not_now","message":"not now","correlation_id":"c1"}}`)
		return
	}
	_, _ = io.WriteString(w, `{"status":"ok"}`)
}

func (s *refusingServer) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.got...)
}

// retryingClient is a client of a server answering answers, retrying by p
// with its waits recorded instead of slept.
func retryingClient(t *testing.T, p RetryPolicy, answers ...refusal) (*Client, *refusingServer, *[]time.Duration) {
	t.Helper()
	s := &refusingServer{answers: answers}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	var waits []time.Duration
	p.sleep = func(_ context.Context, d time.Duration) error {
		waits = append(waits, d)
		return nil
	}
	c := New(srv.URL, "tok")
	c.Retry = &p
	return c, s, &waits
}

type statusBody struct {
	Status string `json:"status"`
}

// A change refused with 429 is sent again after the Retry-After as the same
// request (request id, idempotency key, body), and its answer is the call's.
func TestRetryRateLimitedChange(t *testing.T) {
	c, s, waits := retryingClient(t, RetryPolicy{}, refusal{429, "2"}, refusal{200, ""})
	var out statusBody
	if err := c.Do(t.Context(), http.MethodPost, "/x", nil, map[string]int{"n": 1}, &out); err != nil || out.Status != "ok" {
		t.Fatalf("Do: %+v %v", out, err)
	}
	got := s.requests()
	if len(got) != 2 || got[0] != got[1] || got[0].requestID == "" || got[0].key == "" || got[0].body != `{"n":1}` {
		t.Fatalf("requests: %+v", got)
	}
	if len(*waits) != 1 || (*waits)[0] != 2*time.Second {
		t.Fatalf("waits %v, want [2s]", *waits)
	}
}

// Without a policy a 429 goes to the caller at once, its wait in the error.
func TestNoRetryByDefault(t *testing.T) {
	c, s, _ := retryingClient(t, RetryPolicy{}, refusal{429, "2"}, refusal{200, ""})
	c.Retry = nil
	err := c.Do(t.Context(), http.MethodGet, "/x", nil, nil, nil)
	if api, ok := errors.AsType[*APIError](err); !ok || api.Status != 429 || api.RetryAfter != 2*time.Second || len(s.requests()) != 1 {
		t.Fatalf("err %v after %d requests", err, len(s.requests()))
	}
}

// A 503 may come after a change committed: it is sent again only when the
// server can tell the second from the first (a read, or an idempotency key).
func TestRetryUnavailableOnlyWhenRepeatable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		call  func(c *Client) error
		tries int
	}{
		{"get", func(c *Client) error { _, err := c.Healthz(t.Context()); return err }, 2},
		{"post with key", func(c *Client) error {
			return c.Do(t.Context(), http.MethodPost, "/x", nil, map[string]int{}, nil)
		}, 2},
		{"post without key", func(c *Client) error {
			return c.Do(t.Context(), http.MethodPost, "/x", nil, map[string]int{}, nil, onceOnly)
		}, 1},
		{"post with its key removed", func(c *Client) error {
			return c.Do(t.Context(), http.MethodPost, "/x", nil, map[string]int{}, nil, WithIdempotencyKey(""))
		}, 1},
		{"delete", func(c *Client) error { return c.Do(t.Context(), http.MethodDelete, "/x", nil, nil, nil) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s, _ := retryingClient(t, RetryPolicy{}, refusal{503, "1"}, refusal{200, ""})
			err := tc.call(c)
			if n := len(s.requests()); n != tc.tries {
				t.Fatalf("%d requests, want %d (err %v)", n, tc.tries, err)
			}
			if api, ok := errors.AsType[*APIError](err); tc.tries == 1 && (!ok || api.Status != 503) {
				t.Fatalf("err %v, want the 503", err)
			}
		})
	}
}

// The usage report and the runtime events other than heartbeats carry no
// idempotency key, but the server records each event once by its source
// and id (a repeat is answered "duplicate"), so after a 503 the same batch
// is sent again and the caller gets the repeat's success. A heartbeat is
// applied again whenever it comes (it is not recorded by id): a batch
// holding one gets the 503.
func TestRetryUnavailableReportsTheServerDedupes(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		call  func(c *Client) error
		tries int
	}{
		{"usage", func(c *Client) error {
			_, err := c.ReportUsage(t.Context(), "p1", "i1", []UsageEvent{{ID: "u1", Source: "app", UsageUnit: "tokens", Quantity: 1, Time: at}})
			return err
		}, 2},
		{"runtime events", func(c *Client) error {
			_, err := c.ReportRuntimeEvents(t.Context(), "p1", "i1", []RuntimeEvent{
				{ID: "e1", Source: "app", Type: RuntimeStartCompleted, Time: at},
				{ID: "e2", Source: "app", Type: RuntimeMemberAdded, Member: "w0", Time: at}})
			return err
		}, 2},
		{"heartbeat", func(c *Client) error {
			_, err := c.ReportRuntimeEvents(t.Context(), "p1", "i1", []RuntimeEvent{{ID: "h1", Source: "app", Type: RuntimeHeartbeat, Time: at}})
			return err
		}, 1},
		{"runtime events with a heartbeat", func(c *Client) error {
			_, err := c.ReportRuntimeEvents(t.Context(), "p1", "i1", []RuntimeEvent{
				{ID: "h1", Source: "app", Type: RuntimeHeartbeat, Health: "unhealthy", Time: at},
				{ID: "e1", Source: "app", Type: RuntimeHealthy, Time: at}})
			return err
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s, waits := retryingClient(t, RetryPolicy{}, refusal{503, "1"}, refusal{200, ""})
			err := tc.call(c)
			got := s.requests()
			if len(got) != tc.tries {
				t.Fatalf("%d requests, want %d (err %v)", len(got), tc.tries, err)
			}
			if tc.tries == 1 {
				if api, ok := errors.AsType[*APIError](err); !ok || api.Status != 503 {
					t.Fatalf("err %v, want the 503", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err %v after the resend's 200", err)
			}
			if got[0] != got[1] || got[0].key != "" || !strings.Contains(got[0].body, `"id":"`) {
				t.Fatalf("the resend is not the same batch: %+v", got)
			}
			if len(*waits) != 1 || (*waits)[0] != time.Second {
				t.Fatalf("waits %v, want [1s]", *waits)
			}
		})
	}
}

// The waits: Retry-After as seconds or an HTTP date, 1 s doubling up to
// MaxWait when the server names none, and no more than Retries retries,
// after which the last refusal is the error.
func TestRetryWaits(t *testing.T) {
	date := time.Now().Add(10 * time.Second).UTC().Format(http.TimeFormat)
	c, s, waits := retryingClient(t, RetryPolicy{MaxWait: 20 * time.Second},
		refusal{429, date}, refusal{429, "3"}, refusal{503, ""}, refusal{503, "soon"})
	err := c.Do(t.Context(), http.MethodGet, "/x", nil, nil, nil)
	if api, ok := errors.AsType[*APIError](err); !ok || api.Status != 503 || len(s.requests()) != 4 {
		t.Fatalf("err %v after %d requests, want the 4th answer (503)", err, len(s.requests()))
	}
	w := *waits
	if len(w) != 3 || w[0] <= 8*time.Second || w[0] > 10*time.Second || w[1] != 3*time.Second || w[2] != 4*time.Second {
		t.Fatalf("waits %v, want [~10s 3s 4s]", w)
	}

	c, s, waits = retryingClient(t, RetryPolicy{Retries: 1}, refusal{429, ""})
	_ = c.Do(t.Context(), http.MethodGet, "/x", nil, nil, nil)
	if len(s.requests()) != 2 || len(*waits) != 1 || (*waits)[0] != time.Second {
		t.Fatalf("Retries 1: %d requests, waits %v", len(s.requests()), *waits)
	}

	c, _, waits = retryingClient(t, RetryPolicy{Retries: 5, MaxWait: 5 * time.Second}, refusal{503, ""})
	_ = c.Do(t.Context(), http.MethodGet, "/x", nil, nil, nil)
	if w := *waits; len(w) != 5 || w[2] != 4*time.Second || w[3] != 5*time.Second || w[4] != 5*time.Second {
		t.Fatalf("waits %v, want [1s 2s 4s 5s 5s]", w)
	}
}

// A server asking for a longer wait than MaxWait (a sign-in locked out for
// minutes) gets no early retry, which it would only refuse again: its
// refusal comes back at once, with the wait it asked for.
func TestRetryAfterPastMaxWaitIsReturned(t *testing.T) {
	later := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	for _, ra := range []string{"3600", "21", later} {
		c, s, waits := retryingClient(t, RetryPolicy{MaxWait: 20 * time.Second}, refusal{429, ra}, refusal{200, ""})
		c.Retry.OnRetry = func(n RetryNotice) { t.Errorf("Retry-After %s: told of a retry %+v", ra, n) }
		err := c.Do(t.Context(), http.MethodPost, "/x", nil, map[string]int{}, nil)
		if api, ok := errors.AsType[*APIError](err); !ok || api.Status != 429 || api.RetryAfter <= 20*time.Second ||
			len(s.requests()) != 1 || len(*waits) != 0 {
			t.Fatalf("Retry-After %s: err %v after %d requests, waits %v", ra, err, len(s.requests()), *waits)
		}
	}
}

// OnRetry is told of each retry before its wait: the refusal, the wait and
// which retry of how many it is.
func TestOnRetryTellsOfEachRetry(t *testing.T) {
	c, s, waits := retryingClient(t, RetryPolicy{Retries: 2}, refusal{429, "2"}, refusal{503, ""}, refusal{200, ""})
	var notices []RetryNotice
	c.Retry.OnRetry = func(n RetryNotice) {
		if len(*waits) != len(notices) {
			t.Errorf("told of retry %d after its wait", n.Retry)
		}
		notices = append(notices, n)
	}
	if _, err := c.Healthz(t.Context()); err != nil || len(s.requests()) != 3 {
		t.Fatalf("Healthz: %v after %d requests", err, len(s.requests()))
	}
	if len(notices) != 2 {
		t.Fatalf("notices %+v, want 2", notices)
	}
	for i, want := range []struct {
		status int
		wait   time.Duration
	}{{429, 2 * time.Second}, {503, 2 * time.Second}} {
		n := notices[i]
		if n.Refusal == nil || n.Refusal.Status != want.status || n.Refusal.Code != "not_now" || n.Refusal.CorrelationID != "c1" ||
			n.Wait != want.wait || n.Retry != i+1 || n.Retries != 2 {
			t.Errorf("notice %d: %+v (refusal %+v), want status %d, wait %s, retry %d of 2", i, n, n.Refusal, want.status, want.wait, i+1)
		}
	}
}

// OnRetry is not called when nothing is sent again: a 503 of a change
// without a key, a streamed body, a refusal after the last retry.
func TestOnRetryOnlyWhenSentAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []refusal
		call    func(c *Client) error
		notices int
	}{
		{"delete refused 503", []refusal{{503, "1"}, {200, ""}}, func(c *Client) error {
			return c.Do(t.Context(), http.MethodDelete, "/x", nil, nil, nil)
		}, 0},
		{"upload refused 429", []refusal{{429, "1"}, {200, ""}}, func(c *Client) error {
			_, err := c.UploadBlob(t.Context(), "/up", strings.NewReader("abc"), 3, 0, nil)
			return err
		}, 0},
		{"refused after the last retry", []refusal{{429, "1"}}, func(c *Client) error {
			return c.Do(t.Context(), http.MethodGet, "/x", nil, nil, nil)
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s, _ := retryingClient(t, RetryPolicy{Retries: 1}, tc.answers...)
			notices := 0
			c.Retry.OnRetry = func(RetryNotice) { notices++ }
			err := tc.call(c)
			if _, ok := errors.AsType[*APIError](err); !ok || notices != tc.notices || len(s.requests()) != tc.notices+1 {
				t.Fatalf("err %v after %d requests, %d notices, want %d", err, len(s.requests()), notices, tc.notices)
			}
		})
	}
}

// A streamed body cannot be sent again: the upload's refusal is returned.
func TestNoRetryOfAStreamedBody(t *testing.T) {
	c, s, _ := retryingClient(t, RetryPolicy{}, refusal{429, "1"}, refusal{200, ""})
	_, err := c.UploadBlob(t.Context(), "/up", strings.NewReader("abc"), 3, 0, nil)
	if api, ok := errors.AsType[*APIError](err); !ok || api.Status != 429 || len(s.requests()) != 1 {
		t.Fatalf("err %v after %d requests", err, len(s.requests()))
	}
}

// A context that ends during a wait ends the call then, with the refusal
// and the context's error.
func TestRetryWaitEndsWithTheContext(t *testing.T) {
	s := &refusingServer{answers: []refusal{{429, "30"}}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := New(srv.URL, "tok")
	c.Retry = &RetryPolicy{}
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.Me(ctx)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("returned after %v", took)
	}
	if api, ok := errors.AsType[*APIError](err); !ok || api.Status != 429 || !errors.Is(err, context.Canceled) || len(s.requests()) != 1 {
		t.Fatalf("err %v after %d requests", err, len(s.requests()))
	}
}

// Readyz's 503 is the server's answer (not ready), not a refusal to wait
// out: it comes back at once whatever the policy.
func TestReadyzIsNotRetried(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		_, _ = io.WriteString(w, `{"status":"not_ready","checks":{"database":"unreachable"}}`)
	}))
	defer srv.Close()
	c := New(srv.URL, "")
	c.Retry = &RetryPolicy{sleep: func(context.Context, time.Duration) error { t.Error("Readyz waited to retry"); return nil }}
	if r, err := c.Readyz(t.Context()); err != nil || r.Status != "not_ready" {
		t.Fatalf("Readyz: %+v %v", r, err)
	}
}

// Retry-After is delay-seconds (RFC 9110: 1*DIGIT) or an HTTP date.
// strconv takes a sign too; a server never sends one, so a signed or
// spaced value is unreadable (as in the Python SDK) and the caller falls
// back to its own wait rather than to none.
func TestRetryAfterValues(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"5", 5 * time.Second, true},
		{"007", 7 * time.Second, true},
		{"+5", 0, false},
		{"-0", 0, false},
		{"-5", 0, false},
		{" 5", 0, false},
		{"5 ", 0, false},
		{"1 0", 0, false},
		{"5s", 0, false},
		{"1.5", 0, false},
		{"٣", 0, false}, // a digit, but not an ASCII one
		{"99999999999999999999999", math.MaxInt64, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"soon", 0, false},
	} {
		d, ok := retryAfter(tc.in, now)
		if d != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tc.in, d, ok, tc.want, tc.ok)
		}
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v; want %v", tc.in, got, tc.want)
		}
	}
}

// FuzzRetryAfter: the header is the server's (or a proxy's) word, so
// untrusted: reading it must not panic, a wait is never negative, and a
// value with a sign is never a delay.
func FuzzRetryAfter(f *testing.F) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{"", "0", "5", "+5", "-0", "-9223372036854775808", "9223372036854775807",
		"99999999999999999999999", " 5", now.Format(http.TimeFormat), "Sun Nov  6 08:49:37 1994", "Sunday, 06-Nov-94 08:49:37 GMT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := retryAfter(s, now)
		if d < 0 {
			t.Fatalf("retryAfter(%q) = %v: a negative wait", s, d)
		}
		if !ok && d != 0 {
			t.Fatalf("retryAfter(%q) = %v but unreadable", s, d)
		}
		if ok && (strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-")) {
			t.Fatalf("retryAfter(%q) = %v: a signed value read as a delay", s, d)
		}
	})
}
