package nodes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpuaas/gpuaas/internal/assertion"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// nodeAssertionRules: agents sign with their Ed25519 node key; a node has
// one key, so kid is optional (checked when sent).
var nodeAssertionRules = assertion.Rules{Algorithms: []string{"EdDSA"}, MaxLifetime: MaxAssertionLifetime, Issuer: "node id"}

var grantError = assertion.GrantError

// Exchange verifies a JWT assertion signed by a node's key (iss = sub =
// node id, aud = the node token URL, kid = the node's key id when sent,
// short exp, single-use jti) and mints a short-lived node access token.
func (s *Service) Exchange(ctx context.Context, raw string) (iam.Issued, error) {
	nodeID, tok, err := s.exchange(ctx, raw)
	if err != nil {
		if r := assertion.ReasonOf(err); r != "" {
			s.refuse(ctx, nodeID, "node.token", r)
		}
		return iam.Issued{}, err
	}
	return tok, nil
}

func (s *Service) exchange(ctx context.Context, raw string) (string, iam.Issued, error) {
	as, err := assertion.Parse(raw, nodeAssertionRules)
	if err != nil {
		return "", iam.Issued{}, err
	}
	node, err := s.Store.Read().GetNode(ctx, as.Issuer)
	if errors.Is(err, storage.ErrNotFound) {
		return as.Issuer, iam.Issued{}, grantError("unknown_node", "no node has the id named in the assertion's iss; join again with a new join token")
	}
	if err != nil {
		return as.Issuer, iam.Issued{}, err
	}
	if as.KeyID != "" && as.KeyID != node.KeyID {
		return node.ID, iam.Issued{}, grantError("unknown_key", "the assertion's kid is not this node's key id")
	}
	pub, err := parsePublicKey(node.PublicKey)
	if err != nil {
		return node.ID, iam.Issued{}, fmt.Errorf("node %s: stored public key: %w", node.ID, err)
	}
	if err := as.Verify("EdDSA", pub, "the node's key"); err != nil {
		return node.ID, iam.Issued{}, err
	}
	now := s.Now()
	if err := as.CheckClaims(now, s.TokenURL(), ClockSkew); err != nil {
		return node.ID, iam.Issued{}, err
	}
	if node.State == StateRemoved {
		return node.ID, iam.Issued{}, grantError("node_removed", "node %s was removed; join again with a new join token", node.ID)
	}
	q := s.Store.Read()
	if err := q.UseNodeAssertionID(ctx, node.ID, as.JTI, as.RememberUntil(ClockSkew)); err != nil {
		if errors.Is(err, storage.ErrAlreadyExists) {
			return node.ID, iam.Issued{}, grantError("replayed_assertion", "this assertion's jti was already exchanged; sign a new one")
		}
		return node.ID, iam.Issued{}, err
	}
	if last := s.lastPurge.Load(); now.UnixNano()-last > int64(time.Minute) && s.lastPurge.CompareAndSwap(last, now.UnixNano()) {
		if err := q.PurgeExpiredNodeAssertionIDs(ctx, now); err != nil {
			s.Logger.WarnContext(ctx, "could not purge node assertion ids", "err", err)
		}
	}
	tok, err := s.Tokens.Issue(principal.Principal{Type: principal.Node, ID: node.ID}, node.KeyID)
	if err != nil {
		return node.ID, iam.Issued{}, err
	}
	return node.ID, tok, nil
}

var errNodeToken = errdefs.Unauthenticated("invalid_token",
	"this node token is no longer valid: the node was removed or its credentials were cut off; exchange a new assertion or join again")

// CheckNodeToken is consulted on every request carrying a node token.
func (s *Service) CheckNodeToken(ctx context.Context, c iam.AccessClaims) (principal.Principal, error) {
	state, validAfter, err := s.nodeAuth(ctx, s.Store.Read(), c.Subject)
	if errors.Is(err, storage.ErrNotFound) {
		return principal.Principal{}, errNodeToken
	}
	if err != nil {
		return principal.Principal{}, err
	}
	if state == StateRemoved || c.CutBy(validAfter) {
		return principal.Principal{}, errNodeToken
	}
	return principal.Principal{Type: principal.Node, ID: c.Subject}, nil
}

// nodeAuthTTL bounds how long a replica trusts what it read of a node's
// standing (removed, tokens cut) without hearing of a change: a removal or
// a cut is announced to every replica at once (wakeup.NodeAccess), so the
// TTL only matters when that announcement is lost (node tokens live 15
// minutes). An idle agent's 60 s poll then costs one query, its look.
const nodeAuthTTL = 10 * time.Minute

type nodeAuth struct {
	state      NodeState
	validAfter time.Time
	until      time.Time
}

// nodeAuth reads a node's standing, remembered for nodeAuthTTL: an idle
// agent's long poll would otherwise cost the database a query for its token
// and one for its tasks every minute.
func (s *Service) nodeAuth(ctx context.Context, q Queries, id string) (NodeState, time.Time, error) {
	now := s.Now()
	if v, ok := s.authCache.Load(id); ok {
		if a := v.(nodeAuth); now.Before(a.until) {
			return a.state, a.validAfter, nil
		}
	}
	gen := s.authGen.Load()
	state, validAfter, err := q.NodeAuth(ctx, id)
	if err != nil {
		return state, validAfter, err
	}
	// A change announced while this read ran may be newer than it.
	if s.authGen.Load() == gen {
		s.authCache.Store(id, nodeAuth{state: state, validAfter: validAfter, until: now.Add(nodeAuthTTL)})
	}
	return state, validAfter, nil
}

// forgetNodeAuth drops every remembered node standing.
func (s *Service) forgetNodeAuth() {
	s.authGen.Add(1)
	s.authCache.Clear()
}

// self checks that the caller is the node named in the path. Anyone else —
// another node, a user, an admin — is told the node does not exist.
func self(ctx context.Context, nodeID string) error {
	p := principal.From(ctx)
	if p.Type != principal.Node || p.ID != nodeID {
		return errNodeNotFound(nodeID)
	}
	return nil
}

func errNodeNotFound(id string) error {
	return errdefs.NotFound("node_not_found", "node %q does not exist", id)
}
