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

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/driver/drivertest"
	"github.com/gpuaas/gpuaas/internal/agent/inventory"
)

// joinServer answers the join endpoint with answers[i] for the i-th join
// (joinDrop: the connection is closed without an answer) and 404 elsewhere;
// it records every join request.
func joinServer(t *testing.T, answers ...func(w http.ResponseWriter)) (*httptest.Server, func() []nodeapi.JoinRequest) {
	t.Helper()
	var (
		mu   sync.Mutex
		reqs []nodeapi.JoinRequest
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/nodes/join" {
			http.NotFound(w, r)
			return
		}
		var in nodeapi.JoinRequest
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			t.Errorf("join body: %v", err)
		}
		mu.Lock()
		reqs = append(reqs, in)
		i := len(reqs) - 1
		mu.Unlock()
		if i >= len(answers) {
			i = len(answers) - 1
		}
		answers[i](w)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []nodeapi.JoinRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]nodeapi.JoinRequest(nil), reqs...)
	}
}

// joinDrop closes the connection without an answer, as a cut network or a
// killed proxy does after the server committed the join.
func joinDrop(t *testing.T) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
	}
}

func joinStatus(code int, body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if body != "" && body[0] == '{' {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func noNVIDIA(c *Config) {
	c.NVIDIA = func(context.Context) (inventory.NVIDIA, error) {
		return inventory.NVIDIA{}, errors.New("no nvidia-smi")
	}
}

// A join whose answer is lost (the connection cut, a proxy's 502) is asked
// again with the same token and key, and the agent starts as the node the
// answer names, its identity saved, without a restart.
func TestJoinRetriedAfterLostAnswer(t *testing.T) {
	answer := `{"node_id":"node-1","key_id":"key-1","token_url":"http://x/api/v1/nodes/token","heartbeat_ttl_seconds":10,"inventory_digest":"sha256:00"}`
	srv, joins := joinServer(t, joinDrop(t), joinStatus(http.StatusBadGateway, "bad gateway"), joinStatus(http.StatusCreated, answer))
	a := newFakeAgent(t, &drivertest.Fake{}, noNVIDIA, func(c *Config) { c.Server, c.JoinToken = srv.URL, "gpjt_test" })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	if a.NodeID() != "node-1" {
		t.Fatalf("node id %q", a.NodeID())
	}
	id, ok, err := loadIdentity(a.cfg.DataDir)
	if err != nil || !ok || id.NodeID != "node-1" || id.KeyID != "key-1" {
		t.Fatalf("saved identity %+v %v %v", id, ok, err)
	}
	r := joins()
	if len(r) != 3 {
		t.Fatalf("%d join requests, want 3", len(r))
	}
	for _, x := range r[1:] {
		if x.JoinToken != r[0].JoinToken || x.PublicKeyPEM != r[0].PublicKeyPEM || x.PublicKeyPEM == "" {
			t.Fatalf("a retry changed the token or the key: %+v vs %+v", x, r[0])
		}
	}
}

// A refusal is final: the agent does not ask again.
func TestJoinRefusalIsNotRetried(t *testing.T) {
	refusal := `{"error":{"code":"invalid_join_token","message":"the join token is unknown, expired or already used"}}`
	srv, joins := joinServer(t, joinStatus(http.StatusUnauthorized, refusal))
	a := newFakeAgent(t, &drivertest.Fake{}, noNVIDIA, func(c *Config) { c.Server, c.JoinToken = srv.URL, "gpjt_test" })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Start(ctx); err == nil {
		t.Fatal("start succeeded after a refused join")
	}
	if n := len(joins()); n != 1 {
		t.Fatalf("%d join requests after a refusal, want 1", n)
	}
	if _, ok, _ := loadIdentity(a.cfg.DataDir); ok {
		t.Fatal("an identity was saved after a refused join")
	}
}
