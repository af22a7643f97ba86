package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// testAuthz allows per user, per repository action lists.
type testAuthz struct {
	mu      sync.Mutex
	users   map[string]string              // username -> password
	grants  map[string]map[string][]string // subject -> repository -> actions
	expires map[string]time.Time           // username -> credential expiry (none: no expiry)
}

func newTestAuthz() *testAuthz {
	return &testAuthz{users: map[string]string{}, grants: map[string]map[string][]string{}, expires: map[string]time.Time{}}
}

// expire sets when user's credentials expire (Subject.ExpiresAt).
func (a *testAuthz) expire(user string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expires[user] = at
}

func (a *testAuthz) add(user, password, repo string, actions ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.users[user] = password
	if a.grants[user] == nil {
		a.grants[user] = map[string][]string{}
	}
	a.grants[user][repo] = actions
}

func (a *testAuthz) Authenticate(_ context.Context, username, password string) (Subject, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.users[username]; !ok || p != password {
		return Subject{}, fmt.Errorf("user %q: %w", username, ErrInvalidCredentials)
	}
	return Subject{ID: username, ExpiresAt: a.expires[username]}, nil
}

func (a *testAuthz) Allowed(_ context.Context, s Subject, repo string, requested []string) ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.grants[s.ID][repo]), nil
}

// offsetClock is an injectable clock; zero offset means real time.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) Now() time.Time      { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *offsetClock) set(d time.Duration) { c.offset.Store(int64(d)) }

type testEnv struct {
	reg   *Registry
	srv   *httptest.Server
	host  string
	authz *testAuthz
	clock *offsetClock
	tr    *http.Transport
}

// newTestEnv starts the embedded registry on a real TCP listener, mounted
// at /v2/ of a mux like the control plane's.
func newTestEnv(t testing.TB, mutateCfg func(*Config)) *testEnv {
	t.Helper()
	return newTestEnvWith(t, mutateCfg, nil)
}

// newTestEnvWith is newTestEnv with the registry's Authorizer built by
// wrap from the env's testAuthz (nil: the testAuthz itself), for tests
// that give it a ContentGate.
func newTestEnvWith(t testing.TB, mutateCfg func(*Config), wrap func(*testAuthz) Authorizer) *testEnv {
	t.Helper()
	env := &testEnv{authz: newTestAuthz(), clock: &offsetClock{}}
	env.srv = httptest.NewUnstartedServer(nil)
	env.host = env.srv.Listener.Addr().String()
	cfg := Config{
		RootDir: t.TempDir(),
		Host:    env.host,
		Realm:   "http://" + env.host + TokenPath,
		Now:     env.clock.Now,
	}
	if mutateCfg != nil {
		mutateCfg(&cfg)
	}
	var authz Authorizer = env.authz
	if wrap != nil {
		authz = wrap(env.authz)
	}
	reg, err := New(context.Background(), cfg, authz, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	env.reg = reg
	mux := http.NewServeMux()
	mux.Handle("/v2/", reg.Handler())
	mux.HandleFunc("/api/v1/ping", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "pong") })
	env.srv.Config.Handler = mux
	env.srv.Start()
	env.tr = remote.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(func() {
		env.tr.CloseIdleConnections()
		env.srv.Close()
		if err := reg.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return env
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (e *testEnv) ref(t testing.TB, repo string) name.Reference {
	t.Helper()
	ref, err := name.ParseReference(e.host+"/"+repo+":v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func (e *testEnv) opts(ctx context.Context, auth authn.Authenticator) []remote.Option {
	return []remote.Option{remote.WithAuth(auth), remote.WithTransport(e.tr), remote.WithContext(ctx)}
}

// token asks the token endpoint directly.
func (e *testEnv) token(t testing.TB, user, pass string, query url.Values) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+TokenPath+"?"+query.Encode(), nil)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("token response body: %v", err)
	}
	return resp.StatusCode, body
}

// claims verifies a token against the registry's key set and returns its claims.
func (e *testEnv) claims(t testing.TB, raw string) *TokenClaims {
	t.Helper()
	var c TokenClaims
	_, err := jwt.ParseWithClaims(raw, &c, func(tok *jwt.Token) (any, error) {
		if tok.Header["kid"] != e.reg.Keys().Signing().KeyID() {
			return nil, fmt.Errorf("kid %v", tok.Header["kid"])
		}
		return e.reg.Keys().Signing().Public(), nil
	}, jwt.WithIssuer("gpuaas"), jwt.WithAudience(e.host), jwt.WithTimeFunc(e.clock.Now))
	if err != nil {
		t.Fatalf("parse token: %v", err)
	}
	return &c
}

// bearerStatus calls the registry with a bearer token.
func (e *testEnv) bearerStatus(t testing.TB, method, path, token string) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// ociImage builds a small random OCI image (one layer of size bytes).
func ociImage(t testing.TB, size int64) v1.Image {
	t.Helper()
	layer, err := random.Layer(size, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
