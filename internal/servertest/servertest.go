// Package servertest runs a real gpuaas control plane inside a test — real
// HTTP on a loopback port, real SQLite or PostgreSQL — and drives it through
// clients that check every response against the OpenAPI contract and every
// mutation against the audit log.
package servertest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/server"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// Server is a running control plane for one test.
type Server struct {
	T        testing.TB
	URL      string
	App      *server.App
	DB       *store.DB
	Creds    server.DevCredentials
	Contract *Contract
	Logs     *testbin.Output // everything the server logged (for secret scans); safe to read while it runs

	mu        sync.Mutex
	mutations []mutation
}

type mutation struct{ method, path, correlationID string }

// Option adjusts the config before start.
type Option func(*config.Config)

var (
	contractOnce sync.Once
	contract     *Contract
	contractErr  error
)

// Start runs a server on a fresh database of dialect d, seeded like
// `gpuaas dev`, and stops it at cleanup after checking that every mutation
// the test made left exactly one audit row.
func Start(t testing.TB, d store.Dialect, opts ...Option) *Server {
	t.Helper()
	contractOnce.Do(func() { contract, contractErr = LoadContract() })
	if contractErr != nil {
		t.Fatal(contractErr)
	}
	cfg := config.Defaults()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.DatabaseURL = storetest.URL(t, d)
	cfg.SecretKey = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	// Tests sign in and exchange tokens far faster than a person; the rate
	// limit has its own test that sets it explicitly.
	cfg.CredentialRate, cfg.CredentialBurst = 1000, 1000
	for _, o := range opts {
		o(&cfg)
	}
	logs := &testbin.Output{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	app, err := server.New(ctx, cfg, logger)
	if err != nil {
		cancel()
		t.Fatalf("start server: %v", err)
	}
	if err := app.Listen(); err != nil {
		cancel()
		t.Fatal(err)
	}
	if app.Config.WorkloadAPIURL == workloadsOnBridge {
		app.Config.WorkloadAPIURL = ""
		if err := app.ListenForWorkloads(ctx, server.DockerSocket()); err != nil {
			cancel()
			t.Fatalf("listen for workloads on the Docker bridge: %v", err)
		}
	}
	creds, err := app.SeedDev(ctx)
	if err != nil {
		cancel()
		t.Fatalf("seed: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx) }()
	s := &Server{T: t, URL: app.Config.PublicURL, App: app, DB: app.DB, Creds: creds, Contract: contract, Logs: logs}
	t.Cleanup(func() {
		s.checkAudit()
		s.checkEvents()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server stopped with: %v", err)
		}
		_ = app.Close()
	})
	return s
}

// LogText is what the server logged so far; safe while it runs.
func (s *Server) LogText() string { return s.Logs.String() }

// ReloadSigningKeys has the server read its token signing keys again now
// (what its periodic reload does within a minute: gpuaas keys) and waits
// for that read to end.
func (s *Server) ReloadSigningKeys() {
	s.T.Helper()
	p := s.App.SigningKeyReload()
	n := p.Runs()
	p.Kick()
	ctx, cancel := context.WithTimeout(s.T.Context(), 30*time.Second)
	defer cancel()
	if err := p.WaitRuns(ctx, n+1); err != nil {
		s.T.Fatalf("reload the signing keys: %v", err)
	}
}

// WhileWorkersStopped runs f with the server's background jobs (App.Workers)
// stopped, then starts them again: a test that swaps a service's clock or
// another field the jobs read does it in f, so that no job reads it at the
// same time (Stop waits for a running pass; Start begins after f).
func (s *Server) WhileWorkersStopped(f func()) {
	s.T.Helper()
	s.App.Workers.Stop()
	f()
	if err := s.App.Workers.Start(context.WithoutCancel(s.T.Context())); err != nil {
		s.T.Fatal(err)
	}
}

// nonMutating lists POSTs that change no resource (so leave no audit row of
// their own): sign-in, token exchange, previews, liveness. A workload's
// runtime-event post is audited when it records something or moves health,
// but a heartbeat-only one is liveness bookkeeping, like a node's heartbeat.
// A worker's acquire is audited when it takes a lease, not when it finds
// nothing or hands a worker back the operation it holds.
var nonMutating = []string{"/api/v1/auth/", "/launch-preview", "/unwrap", "/api/v1/nodes/token", "/heartbeat", "/runtime-events", "/worker/acquire"}

func isMutation(method, path string) bool {
	if method == http.MethodGet || method == http.MethodHead {
		return false
	}
	for _, s := range nonMutating {
		if strings.Contains(path, s) {
			return false
		}
	}
	return true
}

// checkAudit asserts every successful mutation left exactly one audit row
// carrying its correlation id.
func (s *Server) checkAudit() {
	s.mu.Lock()
	ms := append([]mutation(nil), s.mutations...)
	s.mu.Unlock()
	s.checkAuditShapes()
	for _, m := range ms {
		evs, _, err := s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{CorrelationID: m.correlationID}, store.Page{Limit: store.MaxPageLimit})
		if err != nil {
			s.T.Errorf("audit check: %v", err)
			continue
		}
		n := 0
		for _, e := range evs {
			// Rows of the platform's own follow-up work (a worker driving
			// the operation the request started, under its correlation id)
			// are not the request's.
			if e.Outcome == "success" && e.ActorType != string(principal.System) {
				n++
			}
		}
		if n != 1 {
			s.T.Errorf("%s %s (correlation %s) left %d success audit rows, want exactly 1", m.method, m.path, m.correlationID, n)
		}
	}
}

// Client calls the API as one principal.
type Client struct {
	S     *Server
	Token string
	HTTP  *http.Client
}

// Anonymous returns a client with no token.
func (s *Server) Anonymous() *Client {
	return &Client{S: s, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// As returns a client using token.
// AsServiceAccount signs an assertion with key, exchanges it at the token
// endpoint as a workload or CI job would, and returns a client acting with
// the token it got.
func (s *Server) AsServiceAccount(key client.KeyFile) *Client {
	s.T.Helper()
	assertion, err := client.SignAssertion(key, key.TokenURL, s.now())
	if err != nil {
		s.T.Fatal(err)
	}
	r := s.Anonymous().Do("POST", "/api/v1/auth/service-account/token",
		map[string]string{"grant_type": client.GrantTypeJWTBearer, "assertion": assertion})
	r.Want(s.T, http.StatusOK)
	return s.As(r.String("access_token"))
}

func (s *Server) As(token string) *Client {
	c := s.Anonymous()
	c.Token = token
	return c
}

// Admin returns a client signed in as the seeded platform admin.
func (s *Server) Admin() *Client { return s.Login(s.Creds.AdminEmail, s.Creds.AdminPassword) }

// Login signs in a user and returns their client.
func (s *Server) Login(email, password string) *Client {
	s.T.Helper()
	r := s.Anonymous().Do("POST", "/api/v1/auth/login", map[string]string{"email": email, "password": password})
	r.Want(s.T, http.StatusOK)
	return s.As(r.String("access_token"))
}

// NewUser creates a user through the API (as admin) and signs them in.
func (s *Server) NewUser(admin *Client, email string) (string, *Client) {
	s.T.Helper()
	pw := "pw-" + uuid.NewString()
	r := admin.Do("POST", "/api/v1/users", map[string]string{"email": email, "password": pw})
	r.Want(s.T, http.StatusCreated)
	return r.String("id"), s.Login(email, pw)
}

// Response is a decoded API response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	JSON   map[string]any
}

// Want fails the test unless the status is one of codes.
func (r *Response) Want(t testing.TB, codes ...int) *Response {
	t.Helper()
	for _, c := range codes {
		if r.Status == c {
			return r
		}
	}
	t.Fatalf("status %d, want %v; body: %s", r.Status, codes, r.Body)
	return r
}

// String returns a top-level string field.
func (r *Response) String(key string) string {
	v, _ := r.JSON[key].(string)
	return v
}

// ErrorCode returns error.code of an envelope.
func (r *Response) ErrorCode() string {
	e, _ := r.JSON["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// Items returns the items of a list response.
func (r *Response) Items() []map[string]any {
	raw, _ := r.JSON["items"].([]any)
	out := make([]map[string]any, 0, len(raw))
	for _, it := range raw {
		m, _ := it.(map[string]any)
		out = append(out, m)
	}
	return out
}

// Do sends a request; body is JSON-encoded unless it is []byte or nil.
// Extra headers come in pairs.
func (c *Client) Do(method, path string, body any, headers ...string) *Response {
	c.S.T.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			c.S.T.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.S.URL+path, rd)
	if err != nil {
		c.S.T.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		c.S.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out := &Response{Status: resp.StatusCode, Header: resp.Header}
	out.Body, _ = io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && len(out.Body) > 0 {
		_ = json.Unmarshal(out.Body, &out.JSON)
	}
	c.S.observe(method, req.URL.Path, resp.StatusCode, resp.Header, out.Body)
	return out
}

// observe checks one response: against the contract, an error's
// correlation id against X-Request-ID, and it notes a successful mutation
// for the audit check at cleanup.
func (s *Server) observe(method, path string, status int, header http.Header, body []byte) {
	if err := s.Contract.Check(method, path, status, header, body); err != nil {
		s.T.Errorf("contract: %v", err)
	}
	// A replayed response is the stored first one, correlation id included.
	if status >= 400 && header.Get("Idempotent-Replayed") == "" {
		var env struct {
			Error struct {
				CorrelationID string `json:"correlation_id"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &env)
		if cid := env.Error.CorrelationID; cid == "" || cid != header.Get("X-Request-ID") {
			s.T.Errorf("%s %s -> %d: error correlation_id %q does not match X-Request-ID %q", method, path, status, cid, header.Get("X-Request-ID"))
		}
	}
	if status < 300 && isMutation(method, path) && header.Get("Idempotent-Replayed") == "" {
		s.mu.Lock()
		s.mutations = append(s.mutations, mutation{method: method, path: path, correlationID: header.Get("X-Request-ID")})
		s.mu.Unlock()
	}
}

// HTTPClient returns an HTTP client whose every response is checked as
// Client.Do checks them (the contract, the error's correlation id, one
// audit row per mutation at cleanup). Give it to the Go client
// (client.Client.HTTP) to hold the SDK to the same rules. Event streams
// pass unchecked.
func (s *Server) HTTPClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: checked{s: s, base: http.DefaultTransport}}
}

type checked struct {
	s    *Server
	base http.RoundTripper
}

func (c checked) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err != nil || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	c.s.observe(req.Method, req.URL.Path, resp.StatusCode, resp.Header, body)
	return resp, nil
}

// RequestHash is the hash the server's idempotency layer keys a request by.
func (s *Server) RequestHash(method, path string, body []byte) string {
	return s.App.API.RequestHash(method, path, body)
}
