package nodes_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/server"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// gpuaas dev with a Docker engine: the in-process agent (simulated here by
// a starter that joins over the real API and beats once) gets a node, and
// the dev project a baremetal allocation of it — on a 0-GPU machine too.
func TestDevNodeGetsTheDevAllocation(t *testing.T) {
	t.Parallel()
	if !server.DockerAnswers(context.Background(), server.DockerSocket()) {
		if os.Getenv("CI") == "true" {
			t.Fatal("no Docker engine answers; CI must have one")
		}
		t.Skip("SKIPPED: no Docker engine answers at " + server.DockerSocket())
	}
	s := servertest.Start(t, store.SQLite)
	start := func(ctx context.Context, apiURL, joinToken, dataDir string) (func(), error) {
		priv, pub := newKey(t)
		r := s.Anonymous().Do("POST", "/api/v1/nodes/join", nodeapi.JoinRequest{JoinToken: joinToken, Name: "dev", PublicKeyPEM: pub,
			Inventory: inventory("dev", 0, "")}).Want(t, 201)
		a := &agent{s: s, id: r.String("node_id"), keyID: r.String("key_id"), tokURL: r.String("token_url"), priv: priv}
		a.c = s.As(a.token(t))
		a.beat(t, nil)
		return func() {}, nil
	}
	n := s.App.StartDevNode(context.Background(), start, s.Creds, 10*time.Second)
	if n.Reason != "" || n.NodeID == "" || n.AllocationID == "" {
		t.Fatalf("dev node %+v", n)
	}
	al := s.Admin().Do("GET", "/api/v1/projects/"+s.Creds.ProjectID+"/allocations/"+n.AllocationID, nil).Want(t, 200)
	if al.String("shape") != "baremetal" || al.String("node_id") != n.NodeID {
		t.Fatalf("allocation %s", al.Body)
	}
	// Without an agent in the build, dev mode says why there is no node.
	if n := s.App.StartDevNode(context.Background(), nil, s.Creds, time.Second); n.Reason == "" {
		t.Fatal("no reason given")
	}
}
