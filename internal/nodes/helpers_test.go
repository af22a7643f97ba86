package nodes_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/servertest"
)

// agent is a simulated node agent driving the real API.
type agent struct {
	s       *servertest.Server
	id      string
	keyID   string
	tokURL  string
	priv    ed25519.PrivateKey
	c       *servertest.Client
	pubPEM  string
	joinTok string
}

func newKey(t testing.TB) (ed25519.PrivateKey, string) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return priv, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func joinToken(t testing.TB, admin *servertest.Client) string {
	t.Helper()
	return admin.Do("POST", "/api/v1/admin/nodes/join-tokens", map[string]any{"description": "test"}).Want(t, 201).String("join_token")
}

func inventory(name string, gpus int, model string) nodeapi.Inventory {
	inv := nodeapi.Inventory{Hostname: name, OS: "linux", Arch: "amd64", CPUCores: 16, MemoryMiB: 64000, GPUs: []nodeapi.GPU{}}
	for i := range gpus {
		inv.GPUs = append(inv.GPUs, nodeapi.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: model, Vendor: "nvidia", MemoryMiB: 81559})
	}
	return inv
}

// join registers a node with gpus GPUs, exchanges a token and beats once.
func join(t testing.TB, s *servertest.Server, admin *servertest.Client, name string, gpus int) *agent {
	t.Helper()
	priv, pub := newKey(t)
	jt := joinToken(t, admin)
	r := s.Anonymous().Do("POST", "/api/v1/nodes/join", nodeapi.JoinRequest{JoinToken: jt, Name: name, PublicKeyPEM: pub,
		Inventory: inventory(name, gpus, "NVIDIA H100 80GB HBM3")}).Want(t, 201)
	a := &agent{s: s, id: r.String("node_id"), keyID: r.String("key_id"), tokURL: r.String("token_url"), priv: priv, pubPEM: pub, joinTok: jt}
	a.c = s.As(a.token(t))
	a.beat(t, nil)
	return a
}

func (a *agent) assertion(t testing.TB, jti string) string {
	now := time.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{Issuer: a.id, Subject: a.id, Audience: jwt.ClaimStrings{a.tokURL},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute)), ID: jti})
	tok.Header["kid"] = a.keyID
	s, err := tok.SignedString(a.priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (a *agent) token(t testing.TB) string {
	t.Helper()
	return a.s.Anonymous().Do("POST", "/api/v1/nodes/token", nodeapi.TokenRequest{Assertion: a.assertion(t, uuid.NewString())}).Want(t, 200).String("access_token")
}

func (a *agent) beat(t testing.TB, inv *nodeapi.Inventory, w ...nodeapi.Workload) *servertest.Response {
	t.Helper()
	return a.c.Do("POST", "/api/v1/nodes/"+a.id+"/heartbeat", nodeapi.Heartbeat{Inventory: inv, Workloads: w}).Want(t, 200)
}
