package billing_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// newClock is a manual clock for a test server (servertest.WithClock), at
// the wall clock's whole second, so times the server stores stay near
// those of what still reads the wall clock (audit rows, the outbox). When
// fewer than five minutes of the hour remain it stands past the next whole
// hour instead: metering cuts intervals at whole hours, and the few minutes
// a test moves its clock then stay inside one hour.
func newClock() *clock.Manual {
	now := time.Now().UTC().Truncate(time.Second)
	if next := now.Truncate(time.Hour).Add(time.Hour); next.Sub(now) < 5*time.Minute {
		now = next.Add(time.Minute)
	}
	return clock.NewManual(now)
}

// joinNode registers a node with gpus GPUs through the real join API (a
// simulated agent: its own key pair, a node-signed token exchange, one
// heartbeat), so allocations can be placed on it.
func joinNode(t *testing.T, s *servertest.Server, admin *servertest.Client, name string, gpus int) string {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	jt := admin.Do("POST", "/api/v1/admin/nodes/join-tokens", map[string]any{"description": "billing test"}).Want(t, 201).String("join_token")
	inv := nodeapi.Inventory{Hostname: name, OS: "linux", Arch: "amd64", CPUCores: 16, MemoryMiB: 64000, GPUs: []nodeapi.GPU{}}
	for i := range gpus {
		inv.GPUs = append(inv.GPUs, nodeapi.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: "NVIDIA H100 80GB HBM3", Vendor: "nvidia", MemoryMiB: 81559})
	}
	r := s.Anonymous().Do("POST", "/api/v1/nodes/join", nodeapi.JoinRequest{JoinToken: jt, Name: name, PublicKeyPEM: pubPEM, Inventory: inv}).Want(t, 201)
	id, keyID, tokURL := r.String("node_id"), r.String("key_id"), r.String("token_url")
	now := s.App.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{Issuer: id, Subject: id, Audience: jwt.ClaimStrings{tokURL},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute)), ID: uuid.NewString()})
	tok.Header["kid"] = keyID
	assertion, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	node := s.As(s.Anonymous().Do("POST", "/api/v1/nodes/token", nodeapi.TokenRequest{Assertion: assertion}).Want(t, 200).String("access_token"))
	node.Do("POST", "/api/v1/nodes/"+id+"/heartbeat", nodeapi.Heartbeat{}).Want(t, 200)
	return id
}

// meteredManifest is an app whose version declares metering.kind.
func meteredManifest(slug, kind string) string {
	return fmt.Sprintf(`app:
  slug: %s
  display_name: %s
  runtime_backend: slurm
  supported_modes:
    operating_modes: [tenant_dedicated]
    control_plane_scopes: [project]
version:
  version: 1.0.0
  metering:
    kind: %s
`, slug, slug, kind)
}

// workload is an app instance and the token of its own service account.
type workload struct {
	ID, SAID string
	Bot      *servertest.Client
	Inst     instances.AppInstance
}

// newWorkload registers a metered app, makes the instance's service
// account through the API (with its key exchanged for a real token), and
// writes the instance row and its timeline through the instances domain's
// store: running from runningFrom, decommissioning at runningTo (zero: still
// running). Each of opts may change the instance row before it is written.
func newWorkload(t *testing.T, s *servertest.Server, admin *servertest.Client, projectID, slug, kind, allocationID string, runningFrom, runningTo time.Time,
	opts ...func(*instances.AppInstance)) workload {
	t.Helper()
	ctx := context.Background()
	admin.Do("POST", "/api/v1/admin/apps/manifests", []byte(meteredManifest(slug, kind)), "Content-Type", "application/yaml").Want(t, 200, 201)
	sa := admin.Do("POST", "/api/v1/projects/"+projectID+"/service-accounts",
		map[string]any{"name": "workload " + slug, "slug": "wl-" + slug + "-" + uuid.NewString()[:6]}).Want(t, 201)
	key := client.KeyFile{Type: client.KeyFileType, ServiceAccountID: sa.String("id"), KeyID: sa.String("key_id"),
		PrivateKeyPEM: sa.String("private_key_pem"), TokenURL: sa.String("token_url")}
	bot := s.AsServiceAccount(key)
	p, err := s.DB.Queries().GetProject(ctx, projectID)
	if err != nil {
		t.Fatal(err)
	}
	now := s.App.Now().UTC()
	inst := instances.AppInstance{ID: uuid.Must(uuid.NewV7()).String(), OrgID: p.OrgID, ProjectID: p.ID, AppSlug: slug, DisplayName: slug,
		Version: "1.0.0", Status: "running", OperatingMode: "tenant_dedicated", ControlPlaneScope: "project",
		RuntimeBackend: "slurm", TenantBoundaryMode: "dedicated", Effective: []byte(`{}`), TargetAllocationID: allocationID,
		ServiceAccountID: key.ServiceAccountID, CreatedBy: "user:test", CreatedAt: now, UpdatedAt: now}
	for _, o := range opts {
		o(&inst)
	}
	type step struct {
		Status string
		At     time.Time
	}
	timeline := []step{{"requested", runningFrom.Add(-time.Minute)}, {"running", runningFrom}}
	if !runningTo.IsZero() {
		inst.Status = "decommissioning"
		timeline = append(timeline, step{"decommissioning", runningTo})
	}
	err = s.DB.InTx(ctx, func(q *store.Queries) error {
		if err := q.InsertAppInstance(ctx, inst); err != nil {
			return err
		}
		for _, e := range timeline {
			payload, _ := json.Marshal(map[string]string{"status": e.Status})
			if err := q.InsertInstanceEvent(ctx, instances.InstanceEvent{ID: uuid.Must(uuid.NewV7()).String(), InstanceID: inst.ID,
				ProjectID: inst.ProjectID, EventType: "apps.instance." + e.Status, Status: instances.InstanceStatus(e.Status), Payload: payload, OccurredAt: e.At}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return workload{ID: inst.ID, SAID: key.ServiceAccountID, Bot: bot, Inst: inst}
}

// usageEvent is one CloudEvents usage event.
func usageEvent(id, source, unit string, qty int64, at time.Time) map[string]any {
	return map[string]any{"specversion": "1.0", "id": id, "source": source, "type": "gpuaas.usage.v1",
		"time": at.UTC().Format(time.RFC3339Nano), "data": map[string]any{"usage_unit": unit, "quantity": qty}}
}

func usagePath(projectID, instanceID string) string {
	return "/api/v1/projects/" + projectID + "/app-instances/" + instanceID + "/usage"
}
