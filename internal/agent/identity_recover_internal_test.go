package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/driver/drivertest"
)

// identityServer stands in for the control plane: it knows node-1 with the
// key in dir's node.key, answers a token exchange signed by that key for
// that node, refuses others as the server does (unknown_node), and answers
// a join with node-2. It counts the calls by path.
func identityServer(t *testing.T, dir string) (*httptest.Server, func(string) int) {
	t.Helper()
	priv, _, err := loadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		calls = map[string]int{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/nodes/token":
			var in nodeapi.TokenRequest
			_ = json.NewDecoder(r.Body).Decode(&in)
			var c jwt.RegisteredClaims
			_, err := jwt.ParseWithClaims(in.Assertion, &c, func(*jwt.Token) (any, error) { return priv.Public().(ed25519.PublicKey), nil },
				jwt.WithValidMethods([]string{"EdDSA"}))
			if err != nil || c.Issuer != "node-1" {
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"error":{"code":"unknown_node","message":"no node has the id named in the assertion's iss"}}`))
				return
			}
			_, _ = w.Write([]byte(`{"access_token":"tok","token_type":"Bearer","expires_in":600}`))
		case "/api/v1/nodes/join":
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"node_id":"node-2","key_id":"key-2","token_url":"http://x/api/v1/nodes/token","heartbeat_ttl_seconds":10,"inventory_digest":"sha256:00"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func(p string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[p]
	}
}

// startWithIdentity starts an agent on a data dir whose node.json holds
// content, with joinToken.
func startWithIdentity(t *testing.T, content, joinToken string) (*Agent, func(string) int, error) {
	t.Helper()
	dir := t.TempDir()
	srv, calls := identityServer(t, dir)
	if err := os.WriteFile(filepath.Join(dir, identityFile), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newFakeAgent(t, &drivertest.Fake{}, noNVIDIA, func(c *Config) { c.Server, c.JoinToken, c.DataDir = srv.URL, joinToken, dir })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return a, calls, a.Start(ctx)
}

// An empty node.json (left by an older agent that did not write it
// durably) stops the agent with the file, the problem and the steps to fix
// it, and nothing is sent to the control plane.
func TestEmptyIdentityFileIsRefusedWithTheFix(t *testing.T) {
	a, calls, err := startWithIdentity(t, "", "")
	if err == nil {
		t.Fatal("the agent started on an empty node.json")
	}
	msg := err.Error()
	for _, want := range []string{filepath.Join(a.cfg.DataDir, identityFile), "is empty", "--join-token", "gpuaas node join-token", filepath.Join(a.cfg.DataDir, keyFile), "gpuaas node remove"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, msg)
		}
	}
	if calls("/api/v1/nodes/join")+calls("/api/v1/nodes/token") != 0 {
		t.Fatal("the agent asked the control plane with nothing to ask")
	}
}

// A node.json cut short that still names its node: the control plane
// accepts node.key's assertion for that node, so the agent starts as it
// and writes the file again, without joining.
func TestTruncatedIdentityFileRecoveredWithTheNodeKey(t *testing.T) {
	a, calls, err := startWithIdentity(t, `{"node_id": "node-1", "key_id": "key-1", "token_url": "http`, "")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if a.NodeID() != "node-1" || calls("/api/v1/nodes/join") != 0 {
		t.Fatalf("node %q after %d joins, want node-1 without a join", a.NodeID(), calls("/api/v1/nodes/join"))
	}
	id, ok, err := loadIdentity(a.cfg.DataDir)
	if err != nil || !ok || id.NodeID != "node-1" || id.KeyID != "key-1" || !strings.HasSuffix(id.TokenURL, "/api/v1/nodes/token") {
		t.Fatalf("node.json after the repair: %+v %v %v", id, ok, err)
	}
}

// A node.json naming a node the control plane refuses for this key, with no
// join token: refused with the node it named and the fix.
func TestTruncatedIdentityFileOfAnUnknownNodeIsRefused(t *testing.T) {
	_, _, err := startWithIdentity(t, `{"node_id": "node-9", "key_i`, "")
	if err == nil || !strings.Contains(err.Error(), "node-9") || !strings.Contains(err.Error(), "--join-token") {
		t.Fatalf("start: %v", err)
	}
}

// An empty node.json with a join token: the agent joins again with its
// node key and saves the new identity.
func TestEmptyIdentityFileRejoinsWithAJoinToken(t *testing.T) {
	a, calls, err := startWithIdentity(t, "", "gpjt_test")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if a.NodeID() != "node-2" || calls("/api/v1/nodes/join") != 1 {
		t.Fatalf("node %q after %d joins", a.NodeID(), calls("/api/v1/nodes/join"))
	}
	if id, ok, err := loadIdentity(a.cfg.DataDir); err != nil || !ok || id.NodeID != "node-2" {
		t.Fatalf("node.json after the join: %+v %v %v", id, ok, err)
	}
}
