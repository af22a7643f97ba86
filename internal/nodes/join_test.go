package nodes_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// An agent that lost its join answer (a cut connection, a crash before it
// saved node.json) asks again with the same token and key: it gets the same
// node back, not invalid_join_token and a phantom node. The repeat changes
// nothing and is audited.
func TestJoinRepeatSameKeyAnswersSameNode(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		s := servertest.Start(t, d)
		admin := s.Admin()
		priv, pub := newKey(t)
		jt := joinToken(t, admin)
		req := nodeapi.JoinRequest{JoinToken: jt, Name: "gpu-r", PublicKeyPEM: pub, Inventory: inventory("gpu-r", 1, "NVIDIA H100 80GB HBM3")}
		first := s.Anonymous().Do("POST", "/api/v1/nodes/join", req).Want(t, 201)
		second := s.Anonymous().Do("POST", "/api/v1/nodes/join", req).Want(t, 201)
		for _, f := range []string{"node_id", "key_id", "token_url", "heartbeat_ttl_seconds"} {
			if first.JSON[f] != second.JSON[f] || first.JSON[f] == nil {
				t.Fatalf("%s: first %v, repeat %v", f, first.JSON[f], second.JSON[f])
			}
		}
		// The digest of what the server holds now is the node's business:
		// the repeat leaves it out (the agent sends its inventory).
		if first.String("inventory_digest") == "" || second.JSON["inventory_digest"] != nil {
			t.Fatalf("inventory_digest: first %v, repeat %v", first.JSON["inventory_digest"], second.JSON["inventory_digest"])
		}
		id := first.String("node_id")
		// A repeat with another name and inventory changes nothing.
		other := req
		other.Name, other.Inventory = "renamed", inventory("renamed", 4, "other")
		if got := s.Anonymous().Do("POST", "/api/v1/nodes/join", other).Want(t, 201).String("node_id"); got != id {
			t.Fatalf("repeat with another inventory: node %s, want %s", got, id)
		}
		n := admin.Do("GET", "/api/v1/admin/nodes/"+id, nil).Want(t, 200)
		if n.String("name") != "gpu-r" || n.JSON["gpu_count"] != float64(1) {
			t.Fatalf("a repeat changed the node: %s", n.Body)
		}
		if l := admin.Do("GET", "/api/v1/admin/nodes", nil).Want(t, 200).JSON["items"].([]any); len(l) != 1 {
			t.Fatalf("nodes after repeats: %d, want 1", len(l))
		}
		// The answer works: the key signs for the node, which beats ready;
		// a repeat after that still answers the same node.
		a := &agent{s: s, id: id, keyID: second.String("key_id"), tokURL: second.String("token_url"), priv: priv, pubPEM: pub, joinTok: jt}
		a.c = s.As(a.token(t))
		if st := a.beat(t, nil).String("state"); st != "ready" {
			t.Fatalf("state after beat %s", st)
		}
		if got := s.Anonymous().Do("POST", "/api/v1/nodes/join", req).Want(t, 201).String("node_id"); got != id {
			t.Fatalf("repeat of a ready node: node %s, want %s", got, id)
		}
		evs, _, err := s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{Action: "node.join", ResourceID: id}, store.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		repeats := 0
		for _, e := range evs {
			if e.Outcome != "success" || e.ActorID != id {
				t.Fatalf("audit row %+v", e)
			}
			if e.Reason == "join_repeated" {
				repeats++
			}
		}
		if len(evs) != 4 || repeats != 3 {
			t.Fatalf("audit: %d node.join rows, %d repeats; want 4 and 3", len(evs), repeats)
		}
	})
}

// A used token is refused for anything but the repeat of its own join:
// another public key, an expired token, a removed node.
func TestJoinRepeatRefused(t *testing.T) {
	t.Parallel()
	refused := func(t *testing.T, r *servertest.Response) {
		t.Helper()
		r.Want(t, 401)
		if r.ErrorCode() != "invalid_join_token" {
			t.Fatalf("code %s", r.ErrorCode())
		}
	}
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		t.Run("other key", func(t *testing.T) {
			t.Parallel()
			s := servertest.Start(t, d)
			admin := s.Admin()
			_, pub := newKey(t)
			_, pub2 := newKey(t)
			jt := joinToken(t, admin)
			inv := inventory("gpu-k", 0, "")
			s.Anonymous().Do("POST", "/api/v1/nodes/join", nodeapi.JoinRequest{JoinToken: jt, PublicKeyPEM: pub, Inventory: inv}).Want(t, 201)
			refused(t, s.Anonymous().Do("POST", "/api/v1/nodes/join", nodeapi.JoinRequest{JoinToken: jt, PublicKeyPEM: pub2, Inventory: inv}))
			if l := admin.Do("GET", "/api/v1/admin/nodes", nil).Want(t, 200).JSON["items"].([]any); len(l) != 1 {
				t.Fatalf("nodes: %d, want 1", len(l))
			}
		})
		t.Run("expired", func(t *testing.T) {
			t.Parallel()
			c := clock.NewManual(time.Now().UTC().Truncate(time.Second))
			s := servertest.Start(t, d, servertest.WithClock(c))
			admin := s.Admin()
			_, pub := newKey(t)
			jt := admin.Do("POST", "/api/v1/admin/nodes/join-tokens", map[string]any{"ttl_seconds": 60}).Want(t, 201).String("join_token")
			req := nodeapi.JoinRequest{JoinToken: jt, PublicKeyPEM: pub, Inventory: inventory("gpu-e", 0, "")}
			s.Anonymous().Do("POST", "/api/v1/nodes/join", req).Want(t, 201)
			c.Advance(61 * time.Second)
			refused(t, s.Anonymous().Do("POST", "/api/v1/nodes/join", req))
		})
		t.Run("removed node", func(t *testing.T) {
			t.Parallel()
			s := servertest.Start(t, d)
			admin := s.Admin()
			_, pub := newKey(t)
			jt := joinToken(t, admin)
			req := nodeapi.JoinRequest{JoinToken: jt, PublicKeyPEM: pub, Inventory: inventory("gpu-x", 0, "")}
			id := s.Anonymous().Do("POST", "/api/v1/nodes/join", req).Want(t, 201).String("node_id")
			admin.Do("POST", "/api/v1/admin/nodes/"+id+"/remove", nil).Want(t, 200)
			refused(t, s.Anonymous().Do("POST", "/api/v1/nodes/join", req))
			if st := admin.Do("GET", "/api/v1/admin/nodes/"+id, nil).Want(t, 200).String("state"); st != "removed" {
				t.Fatalf("state %s", st)
			}
		})
	})
}
