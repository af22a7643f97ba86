package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
	"github.com/gpuaas/gpuaas/internal/agent/driver/drivertest"
	"github.com/gpuaas/gpuaas/internal/agent/engine"
)

// unwrapServer is a stand-in control plane that answers each path with
// answers of its own: its n-th unwrap (from 0) is answered by
// unwrap[min(n, last)], its n-th node token exchange by token[min(n,
// last)], or, when token is empty, with a new node token each time
// (node-tok-1, node-tok-2, …). It keeps the wrapping token and the bearer
// token each unwrap sent.
type unwrapServer struct {
	*httptest.Server
	mu        sync.Mutex
	sent      []string // wrapping tokens
	bearers   []string // the Authorization of each unwrap
	exchanges int
}

// newUnwrapServer is a stand-in control plane whose unwraps are answered
// by answers (see unwrapServer).
func newUnwrapServer(t *testing.T, answers ...func(http.ResponseWriter)) *unwrapServer {
	return newControlPlane(t, answers, nil)
}

func newControlPlane(t *testing.T, unwrap, token []func(http.ResponseWriter)) *unwrapServer {
	s := &unwrapServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/nodes/token":
			s.mu.Lock()
			n := s.exchanges
			s.exchanges++
			s.mu.Unlock()
			if len(token) == 0 {
				nodeToken(fmt.Sprintf("node-tok-%d", n+1))(w)
				return
			}
			token[min(n, len(token)-1)](w)
		case "/api/v1/apps/registry/unwrap":
			tok := wrappingToken(r)
			s.mu.Lock()
			n := len(s.sent)
			s.sent = append(s.sent, tok)
			s.bearers = append(s.bearers, r.Header.Get("Authorization"))
			s.mu.Unlock()
			unwrap[min(n, len(unwrap)-1)](w)
		default:
			t.Errorf("the stand-in control plane was asked %s %s", r.Method, r.URL.Path)
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *unwrapServer) tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

func (s *unwrapServer) authorizations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bearers...)
}

func (s *unwrapServer) exchanged() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exchanges
}

// nodeToken answers a node token exchange with tok.
func nodeToken(tok string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"access_token":"`+tok+`","token_type":"Bearer","expires_in":900}`)
	}
}

// apiError answers status with the server's error envelope, and a
// Retry-After when retryAfter is set.
func apiError(status int, code, retryAfter string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":{"code":"`+code+`","message":"`+code+`"}}`)
	}
}

// proxyError answers as a proxy in front of the control plane does: a bare
// status and a page that is not the error envelope.
func proxyError(status int) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "<html>bad gateway</html>")
	}
}

// hangUp closes the connection without an answer: a control plane that
// went away mid-request.
func hangUp(w http.ResponseWriter) {
	c, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		_ = c.Close()
	}
}

func credentials(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"username":"u","password":"p","registry":"reg.example","repository":"r","actions":["pull"],"expires_at":"2030-01-01T00:00:00Z"}`)
}

// manualUnwrapAgent is an agent of the stand-in control plane at url
// whose clock moves only when it waits; waits lists those waits.
func manualUnwrapAgent(t *testing.T, url string, mod ...func(*Config)) (a *Agent, elapsed func() time.Duration, waits *[]time.Duration) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	a = newFakeAgent(t, &drivertest.Fake{}, append([]func(*Config){func(c *Config) {
		c.Server = url
		c.Now = func() time.Time { return now } // only the unwrapping goroutine moves it
	}}, mod...)...)
	waits = new([]time.Duration)
	a.wait = func(_ context.Context, d time.Duration) bool {
		*waits = append(*waits, d)
		now = now.Add(d)
		return true
	}
	// A key of its own, so that it can exchange assertions for new node
	// tokens once it drops "tok".
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	a.id = identity{NodeID: "node-1", KeyID: "key-1", TokenURL: url + "/api/v1/nodes/token", priv: key}
	a.tok = &tokens{api: a.api, id: &a.id, token: "tok", expiry: time.Now().Add(time.Hour)}
	return a, func() time.Duration { return now.Sub(start) }, waits
}

// An unwrap that finds the control plane busy (a connection closed without
// an answer, 503 unavailable with its Retry-After, a proxy's 502 and 504) sends
// the same token again, after the Retry-After when one came and after a
// growing back-off otherwise, and the pull goes on once it answers.
func TestUnwrapWaitsOutAnUnavailableControlPlane(t *testing.T) {
	// The hang-up comes first, on a new connection: on a reused one Go's
	// transport would send the request again itself, unseen by the agent.
	srv := newUnwrapServer(t, hangUp, apiError(http.StatusServiceUnavailable, "unavailable", "3"),
		proxyError(http.StatusBadGateway), proxyError(http.StatusGatewayTimeout), credentials)
	a, _, waits := manualUnwrapAgent(t, srv.URL)
	cr, err := a.unwrap(context.Background(), "gpw_1")
	if err != nil || cr.Username != "u" {
		t.Fatalf("unwrap after a busy control plane: %+v %v", cr, err)
	}
	// The back-off (1 s, 2 s, 4 s) where no Retry-After came, the 503's
	// Retry-After: 3 where it did; each with its jitter.
	want := []time.Duration{time.Second, 3 * time.Second, 2 * time.Second, 4 * time.Second}
	if len(*waits) != len(want) {
		t.Fatalf("waits %v, want about %v", *waits, want)
	}
	for i, d := range *waits {
		if d < want[i] || d > want[i]+250*time.Millisecond {
			t.Fatalf("waits %v, want about %v", *waits, want)
		}
	}
	if got := srv.tokens(); len(got) != len(want)+1 {
		t.Fatalf("unwraps %v, want one per wait and one more", got)
	}
	for _, s := range srv.tokens() {
		if s != "gpw_1" {
			t.Fatalf("sent %q, want the same token each time", s)
		}
	}
}

// pullReason is the reason the engine's driver gives a pull whose unwrap
// failed with err (docker's pull): the agent's own failure's, and
// credential_refused for any other error.
func pullReason(err error) string {
	var f *driver.Failure
	if errors.As(err, &f) {
		return f.Reason
	}
	return nodeapi.ReasonCredentialRefused
}

// A 401 on unwrap refuses the node's access token, not the wrapping token
// (the control plane authenticates the caller before it looks at it): the
// agent sends the same wrapping token once more at once, with a newly
// exchanged node token. A second 401 in a row is the refusal,
// credential_refused with what to check; and since the 401 spent nothing,
// a 409 after it is the token's refusal too, not a pull failure.
func TestUnwrapTriesOnceMoreWithANewNodeTokenAfterA401(t *testing.T) {
	unauth := apiError(http.StatusUnauthorized, "invalid_token", "")
	for _, c := range []struct {
		name    string
		unwrap  []func(http.ResponseWriter)
		reason  string // "": the credentials come
		says    string
		unwraps int
	}{
		{name: "401 then credentials", unwrap: []func(http.ResponseWriter){unauth, credentials}, unwraps: 2},
		{name: "401 twice", unwrap: []func(http.ResponseWriter){unauth, unauth, credentials}, unwraps: 2,
			reason: nodeapi.ReasonCredentialRefused, says: "refused this node's identity twice in a row"},
		{name: "401 then 409", unwrap: []func(http.ResponseWriter){unauth, apiError(http.StatusConflict, "wrapping_token_invalid", "")},
			unwraps: 2, reason: nodeapi.ReasonCredentialRefused, says: "wrapping_token_invalid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newControlPlane(t, c.unwrap, nil)
			a, _, waits := manualUnwrapAgent(t, srv.URL)
			cr, err := a.unwrap(context.Background(), "gpw_1")
			switch {
			case c.reason == "" && (err != nil || cr.Username != "u"):
				t.Fatalf("unwrap after a 401: %+v %v, want the credentials", cr, err)
			case c.reason != "" && (err == nil || pullReason(err) != c.reason || !strings.Contains(err.Error(), c.says)):
				t.Fatalf("unwrap: %v (reason %s), want %s saying %q", err, pullReason(err), c.reason, c.says)
			}
			if got := srv.tokens(); len(got) != c.unwraps || got[1] != "gpw_1" {
				t.Fatalf("unwraps sent %v, want the same wrapping token %d times", got, c.unwraps)
			}
			// The first unwrap carried the token the server refused, the
			// second one newly exchanged for it, and none waited.
			if got := srv.authorizations(); got[0] != "Bearer tok" || got[1] != "Bearer node-tok-1" || srv.exchanged() != 1 {
				t.Fatalf("unwraps carried %v after %d exchanges, want Bearer tok then Bearer node-tok-1 after one", got, srv.exchanged())
			}
			if len(*waits) != 0 {
				t.Fatalf("waited %v before the second try, want it at once", *waits)
			}
		})
	}
	t.Run("refusal says what to check", func(t *testing.T) {
		srv := newControlPlane(t, []func(http.ResponseWriter){unauth}, nil)
		a, _, _ := manualUnwrapAgent(t, srv.URL)
		_, err := a.unwrap(context.Background(), "gpw_1")
		for _, want := range []string{"newly exchanged node token", "node node-1 is not removed", "gpuaas node get node-1", "gpuaas node join-token"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("refused twice: %v, want it to say %q", err, want)
			}
		}
	})
}

// A try whose node token exchange failed (503, or no answer) never sent
// the wrapping token, so it cannot have spent it: a 409 after it is the
// token's refusal, credential_refused. An unwrap that was sent and got no
// answer may have spent it: a 409 after that is image_pull_failed.
func TestUnwrapCountsOnlyTriesThatSentTheWrappingToken(t *testing.T) {
	refused := apiError(http.StatusConflict, "wrapping_token_invalid", "")
	for _, c := range []struct {
		name          string
		unwrap, token []func(http.ResponseWriter)
		noNodeToken   bool // the agent holds no node token: its first try exchanges one
		reason, says  string
		unwraps       int
	}{
		{name: "exchange unavailable", token: []func(http.ResponseWriter){apiError(http.StatusServiceUnavailable, "unavailable", ""), nodeToken("node-tok-1")},
			unwrap: []func(http.ResponseWriter){refused}, noNodeToken: true, unwraps: 1,
			reason: nodeapi.ReasonCredentialRefused, says: "wrapping_token_invalid"},
		{name: "exchange unanswered", token: []func(http.ResponseWriter){hangUp, nodeToken("node-tok-1")},
			unwrap: []func(http.ResponseWriter){refused}, noNodeToken: true, unwraps: 1,
			reason: nodeapi.ReasonCredentialRefused, says: "wrapping_token_invalid"},
		{name: "unwrap unanswered", unwrap: []func(http.ResponseWriter){hangUp, refused}, unwraps: 2,
			reason: nodeapi.ReasonImagePullFailed, says: "may have used it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newControlPlane(t, c.unwrap, c.token)
			a, _, waits := manualUnwrapAgent(t, srv.URL)
			if c.noNodeToken {
				a.tok.Drop()
			}
			_, err := a.unwrap(context.Background(), "gpw_1")
			if err == nil || pullReason(err) != c.reason || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("unwrap: %v (reason %s), want %s saying %q", err, pullReason(err), c.reason, c.says)
			}
			// One wait, after the try that failed: the exchange's, or the
			// unwrap's.
			if got := len(srv.tokens()); got != c.unwraps || len(*waits) != 1 {
				t.Fatalf("%d unwraps sent after %d waits, want %d after one", got, len(*waits), c.unwraps)
			}
		})
	}
}

// An image.pull whose unwraps find the control plane unavailable, or
// unreachable, for longer than the patience fails image_pull_failed with a
// reason that says so, not credential_refused; the last try goes when the
// patience ends, a wait that would pass it cut short. A refusal of the
// token (409) or of the node (403) is credential_refused at once, with no
// second try, and a 500 image_pull_failed at once (the control plane
// failed: nothing was refused, but the token may be spent); a 409 after a try that got no answer is not (that try may
// have used the token). Through the real engine's driver, which turns the
// agent's unwrap errors into the task's reason.
func TestUnwrapRefusalsAndOutagesAsTheTaskReports(t *testing.T) {
	agenttest.RequireDocker(t)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // nothing listens there any more: connection refused
	for _, c := range []struct {
		name    string
		answers []func(http.ResponseWriter)
		down    bool // the control plane is not there at all
		reason  string
		says    string
		tries   int // 0: as many as the patience takes
	}{
		{name: "unavailable", answers: []func(http.ResponseWriter){apiError(http.StatusServiceUnavailable, "unavailable", "")},
			reason: nodeapi.ReasonImagePullFailed, says: "unavailable (HTTP 503)"},
		{name: "unreachable", down: true, reason: nodeapi.ReasonImagePullFailed, says: "could not be reached"},
		{name: "forbidden", answers: []func(http.ResponseWriter){apiError(http.StatusForbidden, "forbidden", "")},
			reason: nodeapi.ReasonCredentialRefused, tries: 1},
		{name: "token refused", answers: []func(http.ResponseWriter){apiError(http.StatusConflict, "wrapping_token_invalid", "")},
			reason: nodeapi.ReasonCredentialRefused, tries: 1},
		{name: "internal error", answers: []func(http.ResponseWriter){apiError(http.StatusInternalServerError, "internal", "")},
			reason: nodeapi.ReasonImagePullFailed, says: "HTTP 500", tries: 1},
		{name: "token refused after no answer", answers: []func(http.ResponseWriter){proxyError(http.StatusGatewayTimeout),
			apiError(http.StatusConflict, "wrapping_token_invalid", "")},
			reason: nodeapi.ReasonImagePullFailed, says: "may have used it", tries: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var srv *unwrapServer
			url := gone.URL
			if !c.down {
				srv = newUnwrapServer(t, c.answers...)
				url = srv.URL
			}
			a, elapsed, waits := manualUnwrapAgent(t, url, func(cfg *Config) { cfg.Driver = engine.New })
			a.drv.SetNodeID("unwrap-" + strings.ReplaceAll(c.name, " ", "-"))
			// A digest no engine holds, so the driver asks for credentials.
			pull := nodeapi.ImagePull{Repository: "registry.invalid/app",
				Digest: "sha256:4444444444444444444444444444444444444444444444444444444444444444", WrappingToken: "gpw_1"}
			res := a.execute(context.Background(), task(t, "pull-1", nodeapi.KindImagePull, "inst-1", pull))
			if res.ReasonCode != c.reason || !strings.Contains(res.Message, c.says) {
				t.Fatalf("pull: %s %q, want %s saying %q", res.ReasonCode, res.Message, c.reason, c.says)
			}
			if c.tries > 0 {
				if got := len(srv.tokens()); got != c.tries || len(*waits) != c.tries-1 {
					t.Fatalf("%d unwraps, %d waits; want %d unwraps", got, len(*waits), c.tries)
				}
				return
			}
			// The back-off grows from a second to its cap; the last wait is
			// what was left, and the last try comes at the patience's end.
			if elapsed() != unwrapPatience {
				t.Fatalf("gave up after %v (waits %v), want the last try at %v", elapsed(), *waits, unwrapPatience)
			}
			for i, d := range (*waits)[:len(*waits)-1] {
				want := min(time.Second<<i, unwrapMaxBackoff)
				if d < want || d > want+250*time.Millisecond {
					t.Fatalf("wait %d was %v, want about %v (waits %v)", i, d, want, *waits)
				}
			}
			if srv != nil && len(srv.tokens()) != len(*waits)+1 {
				t.Fatalf("%d unwraps for %d waits; want one per wait and one more", len(srv.tokens()), len(*waits))
			}
		})
	}
}
