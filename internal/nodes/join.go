package nodes

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// JoinTokenPrefix marks gpuaas join tokens so secret scanners can find them.
const JoinTokenPrefix = "gpjt_"

// JoinTokenInput asks for a join token.
type JoinTokenInput struct {
	Description string `json:"description"`
	TTLSeconds  int    `json:"ttl_seconds"`
}

// IssuedJoinToken is a new join token; Token is shown this once.
type IssuedJoinToken struct {
	ID        string
	Token     string
	ExpiresAt time.Time
	JoinURL   string
}

// CreateJoinToken mints a single-use bootstrap token (platform admins).
func (s *Service) CreateJoinToken(ctx context.Context, g *iam.Grants, in JoinTokenInput) (IssuedJoinToken, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermNodesWrite, "node_join_token"); err != nil {
		return IssuedJoinToken{}, err
	}
	return s.IssueJoinToken(ctx, in.Description, in.TTLSeconds)
}

// IssueJoinToken mints a join token without the permission check, for the
// control plane itself (dev mode's node).
func (s *Service) IssueJoinToken(ctx context.Context, description string, ttlSeconds int) (IssuedJoinToken, error) {
	in := JoinTokenInput{Description: description, TTLSeconds: ttlSeconds}
	ttl := DefaultJoinTokenTTL
	if in.TTLSeconds != 0 {
		ttl = time.Duration(in.TTLSeconds) * time.Second
		if in.TTLSeconds < 60 || ttl > MaxJoinTokenTTL {
			return IssuedJoinToken{}, errdefs.Validation([]errdefs.FieldError{{Field: "/ttl_seconds", Code: "out_of_range",
				Message: fmt.Sprintf("must be between 60 and %d seconds (omit it for %s)", int(MaxJoinTokenTTL.Seconds()), DefaultJoinTokenTTL)}})
		}
	}
	if len(in.Description) > 500 {
		return IssuedJoinToken{}, errdefs.Validation([]errdefs.FieldError{{Field: "/description", Code: "too_long", Message: "must be at most 500 characters"}})
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return IssuedJoinToken{}, err
	}
	token := JoinTokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	now := s.Now()
	t := NodeJoinToken{ID: iam.NewID(), TokenHash: hashToken(token), Description: in.Description,
		CreatedBy: principal.From(ctx).Key(), CreatedAt: now, ExpiresAt: now.Add(ttl)}
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.InsertNodeJoinToken(ctx, t); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "node.join_token.create", ResourceType: "node_join_token", ResourceID: t.ID}, nil,
			map[string]any{"description": t.Description, "expires_at": t.ExpiresAt})
	})
	if err != nil {
		return IssuedJoinToken{}, err
	}
	s.Logger.InfoContext(ctx, "node join token created", "join_token_id", t.ID, "expires_at", t.ExpiresAt)
	return IssuedJoinToken{ID: t.ID, Token: token, ExpiresAt: t.ExpiresAt}, nil
}

func hashToken(t string) string {
	sum := sha256.Sum256([]byte(t))
	return hex.EncodeToString(sum[:])
}

var errJoinToken = errdefs.Unauthenticated("invalid_join_token",
	"the join token is unknown, expired or already used; a platform admin can create a new one (gpuaas node join-token)")

// Limits of what a node may report.
const (
	maxNameLen    = 200
	maxGPUs       = 64
	maxWorkloads  = 1000
	maxFieldLen   = 256
	maxPublicKey  = 4 << 10
	maxInventoryB = 64 << 10
)

// Join redeems a join token: registers the node with its public key and
// inventory. The token works once: a second use fails, unless it repeats
// the first join's public key before the token expires (see rejoin).
func (s *Service) Join(ctx context.Context, in nodeapi.JoinRequest) (nodeapi.JoinResponse, error) {
	if in.JoinToken == "" || len(in.JoinToken) > 128 {
		return nodeapi.JoinResponse{}, errJoinToken
	}
	in.Name = strings.TrimSpace(in.Name)
	if in.Name == "" {
		in.Name = in.Inventory.Hostname
	}
	var fe []errdefs.FieldError
	if in.Name == "" || len(in.Name) > maxNameLen {
		fe = append(fe, errdefs.FieldError{Field: "/name", Code: "required", Message: fmt.Sprintf("is required (or inventory.hostname), at most %d characters", maxNameLen)})
	}
	if _, err := parsePublicKey(in.PublicKeyPEM); err != nil {
		fe = append(fe, errdefs.FieldError{Field: "/public_key_pem", Code: "invalid", Message: "must be an Ed25519 public key in PKIX PEM form (BEGIN PUBLIC KEY)"})
	}
	fe = append(fe, checkInventory("/inventory", in.Inventory)...)
	if fe != nil {
		return nodeapi.JoinResponse{}, errdefs.Validation(fe)
	}
	q := s.Store.Read()
	t, err := q.GetNodeJoinTokenByHash(ctx, hashToken(in.JoinToken))
	if errors.Is(err, storage.ErrNotFound) {
		s.refuse(ctx, "", "node.join", "unknown_join_token")
		return nodeapi.JoinResponse{}, errJoinToken
	}
	if err != nil {
		return nodeapi.JoinResponse{}, err
	}
	now := s.Now()
	if !t.UsedAt.IsZero() {
		return s.rejoin(ctx, t, in.PublicKeyPEM, now)
	}
	if !now.Before(t.ExpiresAt) {
		s.refuse(ctx, t.ID, "node.join", "join_token_expired")
		return nodeapi.JoinResponse{}, errJoinToken
	}
	inv, digest, err := encodeInventory(in.Inventory)
	if err != nil {
		return nodeapi.JoinResponse{}, err
	}
	n := Node{ID: iam.NewID(), Name: in.Name, State: StateJoining, KeyID: iam.NewID(), PublicKey: in.PublicKeyPEM,
		Inventory: inv, InventoryDigest: digest, Workloads: []byte("[]"), LastHeartbeatAt: now, StateChangedAt: now, CreatedAt: now, UpdatedAt: now}
	summarize(&n, in.Inventory)
	n.FreeGPUs = n.GPUCount
	// The node acts for itself from here on: the audit row names it.
	ctx = principal.With(ctx, principal.Principal{Type: principal.Node, ID: n.ID})
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.UseNodeJoinToken(ctx, t.ID, n.ID, now); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return errJoinRaced
			}
			return err
		}
		if err := tx.InsertNode(ctx, n); err != nil {
			return err
		}
		if err := tx.SetNodeInventory(ctx, n, gpusOf(n.ID, in.Inventory), now); err != nil {
			return err
		}
		if err := tx.Emit(storage.Event{Type: EventNodeJoined, Subject: nodeSubject(n.ID)}, map[string]any{
			"node_id": n.ID, "name": n.Name, "gpu_count": n.GPUCount, "gpu_model": n.GPUModel}); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "node.join", ResourceType: "node", ResourceID: n.ID}, nil,
			map[string]any{"name": n.Name, "join_token_id": t.ID, "gpu_count": n.GPUCount, "inventory_digest": digest})
	})
	if errors.Is(err, errJoinRaced) {
		// A concurrent join won: the same agent's own retry gets its answer.
		if t, err = q.GetNodeJoinTokenByHash(ctx, t.TokenHash); err != nil {
			return nodeapi.JoinResponse{}, err
		}
		return s.rejoin(ctx, t, in.PublicKeyPEM, now)
	}
	if err != nil {
		return nodeapi.JoinResponse{}, err
	}
	s.Logger.InfoContext(ctx, "node joined", "node_id", n.ID, "name", n.Name, "gpus", n.GPUCount)
	return s.joinAnswer(n), nil
}

// errJoinRaced: another join spent the token between the read and the write.
var errJoinRaced = errors.New("join token spent by a concurrent join")

// joinAnswer is what a join answers for n. It carries no secret: the node
// id and key id name the node in every assertion it signs, the token URL
// and heartbeat TTL are the server's, the digest is of what the node sent.
func (s *Service) joinAnswer(n Node) nodeapi.JoinResponse {
	return nodeapi.JoinResponse{NodeID: n.ID, KeyID: n.KeyID, TokenURL: s.TokenURL(), HeartbeatTTLS: int(s.HeartbeatTTL.Seconds()),
		InventoryDigest: n.InventoryDigest}
}

// rejoin answers a join with an already used token t. The agent that
// joined with it may have lost the answer (a cut connection, a crash before
// it saved its identity) and asks again: while t has not expired, the same
// public key gets the node's join answer again — the same node, nothing
// written but the audit row. Any other use is refused as a used token: a
// different key, an expired token, a removed node.
//
// The request is not signed, so the key proves nothing; the repeat is safe
// because it hands out nothing a holder of the token and the public key
// could not learn before: the answer has no credential (see joinAnswer) —
// acting as the node needs an assertion signed by the private key — and it
// leaves out the inventory digest, which heartbeats may have changed since
// the join (the agent then sends its inventory with its first beat, as
// after any restart). The repeat changes nothing: not the name, the
// inventory or the state.
func (s *Service) rejoin(ctx context.Context, t NodeJoinToken, publicKeyPEM string, now time.Time) (nodeapi.JoinResponse, error) {
	reason := "join_token_used"
	if now.Before(t.ExpiresAt) && t.NodeID != "" {
		n, err := s.Store.Read().GetNode(ctx, t.NodeID)
		switch {
		case errors.Is(err, storage.ErrNotFound):
		case err != nil:
			return nodeapi.JoinResponse{}, err
		case n.State != StateRemoved && sameKey(n.PublicKey, publicKeyPEM):
			ctx = principal.With(ctx, principal.Principal{Type: principal.Node, ID: n.ID})
			after, err := json.Marshal(map[string]any{"join_token_id": t.ID, "repeat": true})
			if err != nil {
				return nodeapi.JoinResponse{}, err
			}
			if err := s.Store.RecordOutcome(ctx, storage.AuditEvent{Action: "node.join", ResourceType: "node", ResourceID: n.ID,
				After: after, Reason: "join_repeated"}, "success"); err != nil {
				return nodeapi.JoinResponse{}, err
			}
			s.Logger.InfoContext(ctx, "node join repeated", "node_id", n.ID, "join_token_id", t.ID)
			r := s.joinAnswer(n)
			r.InventoryDigest = ""
			return r, nil
		}
	}
	s.refuse(ctx, t.ID, "node.join", reason)
	return nodeapi.JoinResponse{}, errJoinToken
}

// sameKey reports whether two PEM public keys are the same Ed25519 key.
func sameKey(a, b string) bool {
	ka, err := parsePublicKey(a)
	if err != nil {
		return false
	}
	kb, err := parsePublicKey(b)
	return err == nil && ka.Equal(kb)
}

// refuse writes the failure audit row of a refused node credential use.
func (s *Service) refuse(ctx context.Context, resourceID, action, reason string) {
	rt := "node"
	if action == "node.join" {
		rt = "node_join_token"
	}
	if err := s.Store.RecordOutcome(ctx, storage.AuditEvent{Action: action, ResourceType: rt, ResourceID: resourceID, Reason: reason}, "failure"); err != nil {
		s.Logger.ErrorContext(ctx, "could not audit a refused node credential", "err", err)
	}
	s.Logger.InfoContext(ctx, "node credential refused", "action", action, "reason", reason)
}

func parsePublicKey(p string) (ed25519.PublicKey, error) {
	if p == "" || len(p) > maxPublicKey {
		return nil, errors.New("missing or too large")
	}
	b, _ := pem.Decode([]byte(p))
	if b == nil || b.Type != "PUBLIC KEY" {
		return nil, errors.New("not a PEM public key")
	}
	k, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, errors.New("not Ed25519")
	}
	return ek, nil
}

// checkInventory bounds what a node reports before it is stored.
func checkInventory(at string, inv nodeapi.Inventory) []errdefs.FieldError {
	var fe []errdefs.FieldError
	bad := func(f, msg string) { fe = append(fe, errdefs.FieldError{Field: at + f, Code: "invalid", Message: msg}) }
	for f, v := range map[string]string{"/hostname": inv.Hostname, "/os": inv.OS, "/kernel": inv.Kernel, "/arch": inv.Arch,
		"/agent_version": inv.AgentVersion, "/docker_version": inv.DockerVersion, "/docker_api_version": inv.DockerAPI,
		"/nvidia_driver_version": inv.NVIDIADriver, "/cuda_version": inv.CUDAVersion, "/address": inv.Address} {
		if len(v) > maxFieldLen {
			bad(f, fmt.Sprintf("must be at most %d characters", maxFieldLen))
		}
	}
	if inv.CPUCores < 0 || inv.MemoryMiB < 0 || inv.DiskMiB < 0 {
		bad("", "cpu_cores, memory_mib and disk_mib must not be negative")
	}
	if len(inv.GPUs) > maxGPUs {
		bad("/gpus", fmt.Sprintf("at most %d GPUs per node", maxGPUs))
		return fe
	}
	seen := map[string]bool{}
	for i, g := range inv.GPUs {
		f := fmt.Sprintf("/gpus/%d", i)
		switch {
		case g.UUID == "" || len(g.UUID) > maxFieldLen:
			bad(f+"/uuid", "every GPU needs its UUID (as nvidia-smi reports it)")
		case seen[g.UUID]:
			bad(f+"/uuid", "GPU UUIDs must be unique within a node")
		case len(g.Model) > maxFieldLen || len(g.Vendor) > maxFieldLen || len(g.PCIBusID) > maxFieldLen || len(g.MIGMode) > maxFieldLen || len(g.ComputeCapability) > maxFieldLen:
			bad(f, fmt.Sprintf("GPU fields are at most %d characters", maxFieldLen))
		case g.MemoryMiB < 0:
			bad(f+"/memory_mib", "must not be negative")
		}
		seen[g.UUID] = true
	}
	return fe
}

// encodeInventory returns the stored form of an inventory and its digest
// (nodeapi.Inventory.Canonical), bounded in size.
func encodeInventory(inv nodeapi.Inventory) ([]byte, string, error) {
	b, d, err := inv.Canonical()
	if err != nil {
		return nil, "", err
	}
	if len(b) > maxInventoryB {
		return nil, "", errdefs.Validation([]errdefs.FieldError{{Field: "/inventory", Code: "too_large", Message: fmt.Sprintf("must encode to at most %d bytes", maxInventoryB)}})
	}
	return b, d, nil
}

// InventoryDigest is the digest the server keeps of an inventory; agents
// may compare it to decide whether to send theirs.
func InventoryDigest(inv nodeapi.Inventory) string {
	_, d, _ := encodeInventory(inv)
	return d
}

// summarize fills the placement summary of n from its inventory: GPU
// count, the model and vendor when all GPUs share them, the smallest memory.
func summarize(n *Node, inv nodeapi.Inventory) {
	n.GPUCount, n.GPUModel, n.GPUVendor, n.GPUMemoryMiB = len(inv.GPUs), "", "", 0
	for i, g := range inv.GPUs {
		vendor := vendorOf(g)
		if i == 0 {
			n.GPUModel, n.GPUVendor, n.GPUMemoryMiB = g.Model, vendor, g.MemoryMiB
			continue
		}
		if g.Model != n.GPUModel {
			n.GPUModel = "mixed"
		}
		if vendor != n.GPUVendor {
			n.GPUVendor = "mixed"
		}
		n.GPUMemoryMiB = min(n.GPUMemoryMiB, g.MemoryMiB)
	}
}

func vendorOf(g nodeapi.GPU) string {
	if g.Vendor == "" {
		return "nvidia"
	}
	return strings.ToLower(g.Vendor)
}

func gpusOf(nodeID string, inv nodeapi.Inventory) []NodeGPU {
	out := make([]NodeGPU, 0, len(inv.GPUs))
	for _, g := range inv.GPUs {
		out = append(out, NodeGPU{NodeID: nodeID, UUID: g.UUID, Index: g.Index, Model: g.Model, Vendor: vendorOf(g), MemoryMiB: g.MemoryMiB})
	}
	return out
}
