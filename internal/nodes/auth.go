package nodes

import (
	"context"
	"errors"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/store"
)

// MaxAssertionBytes bounds a node assertion before parsing.
const MaxAssertionBytes = 8 << 10

func grantError(reason, format string, args ...any) *errdefs.Error {
	return errdefs.Invalid("invalid_grant", format, args...).WithDetails(map[string]any{"reason": reason})
}

func reasonOf(err error) string {
	if e, ok := errdefs.As(err); ok && e.Details != nil {
		if r, ok := e.Details["reason"].(string); ok {
			return r
		}
	}
	return ""
}

// Exchange verifies a JWT assertion signed by a node's key (iss = sub =
// node id, aud = the node token URL, kid = the node's key id when sent,
// short exp, single-use jti) and mints a short-lived node access token.
func (s *Service) Exchange(ctx context.Context, assertion string) (iam.Issued, error) {
	nodeID, tok, err := s.exchange(ctx, assertion)
	if err != nil {
		if r := reasonOf(err); r != "" {
			s.refuse(ctx, nodeID, "node.token", r)
		}
		return iam.Issued{}, err
	}
	return tok, nil
}

func (s *Service) exchange(ctx context.Context, raw string) (string, iam.Issued, error) {
	if raw == "" {
		return "", iam.Issued{}, grantError("missing_assertion", "send the node-signed JWT in the assertion field")
	}
	if len(raw) > MaxAssertionBytes {
		return "", iam.Issued{}, grantError("assertion_too_large", "the assertion is larger than %d bytes", MaxAssertionBytes)
	}
	var (
		c    jwt.RegisteredClaims
		node store.Node
	)
	now := s.Now()
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithAudience(s.TokenURL()), jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(), jwt.WithTimeFunc(func() time.Time { return now }), jwt.WithLeeway(ClockSkew))
	var lookupErr error
	_, err := parser.ParseWithClaims(raw, &c, func(t *jwt.Token) (any, error) {
		if c.Issuer == "" || c.Subject != c.Issuer || len(c.Issuer) > 64 {
			lookupErr = grantError("invalid_issuer", "the assertion's iss and sub must both be the node id")
			return nil, lookupErr
		}
		n, err := s.DB.Queries().GetNode(ctx, c.Issuer)
		if errors.Is(err, store.ErrNotFound) {
			lookupErr = grantError("unknown_node", "no node has the id named in the assertion's iss; join again with a new join token")
			return nil, lookupErr
		}
		if err != nil {
			lookupErr = err
			return nil, err
		}
		if kid, _ := t.Header["kid"].(string); kid != "" && kid != n.KeyID {
			lookupErr = grantError("unknown_key", "the assertion's kid is not this node's key id")
			return nil, lookupErr
		}
		node = n
		return parsePublicKey(n.PublicKey)
	})
	if lookupErr != nil {
		return c.Issuer, iam.Issued{}, lookupErr
	}
	if err != nil {
		switch {
		case errors.Is(err, jwt.ErrTokenExpired):
			return c.Issuer, iam.Issued{}, grantError("assertion_expired", "the assertion expired; sign a fresh one for every exchange")
		case errors.Is(err, jwt.ErrTokenInvalidAudience):
			return c.Issuer, iam.Issued{}, grantError("invalid_audience", "the assertion's aud must be exactly %q", s.TokenURL())
		case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
			return c.Issuer, iam.Issued{}, grantError("issued_in_future", "the assertion's iat is in the future; check the node's clock")
		case errors.Is(err, jwt.ErrTokenSignatureInvalid):
			return c.Issuer, iam.Issued{}, grantError("invalid_signature", "the assertion's signature does not verify with the node's key")
		}
		return c.Issuer, iam.Issued{}, grantError("malformed_assertion", "the assertion is not a valid EdDSA-signed JWT with iss, sub, aud, iat, exp and jti")
	}
	if len(c.Audience) != 1 {
		return node.ID, iam.Issued{}, grantError("invalid_audience", "the assertion's aud must be exactly %q", s.TokenURL())
	}
	if c.ID == "" || len(c.ID) > 128 {
		return node.ID, iam.Issued{}, grantError("missing_jti", "the assertion needs a fresh jti for every exchange")
	}
	if c.IssuedAt == nil || c.ExpiresAt.Sub(c.IssuedAt.Time) > MaxAssertionLifetime || !c.ExpiresAt.After(c.IssuedAt.Time) {
		return node.ID, iam.Issued{}, grantError("invalid_lifetime", "the assertion needs iat, and exp after iat by at most %s", MaxAssertionLifetime)
	}
	if node.State == StateRemoved {
		return node.ID, iam.Issued{}, grantError("node_removed", "node %s was removed; join again with a new join token", node.ID)
	}
	q := s.DB.Queries()
	if err := q.UseNodeAssertionID(ctx, node.ID, c.ID, c.ExpiresAt.Add(ClockSkew)); err != nil {
		if errors.Is(err, store.ErrAlreadyExists) {
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
func (s *Service) CheckNodeToken(ctx context.Context, q *store.Queries, c iam.AccessClaims) (principal.Principal, error) {
	state, validAfter, err := q.NodeAuth(ctx, c.Subject)
	if errors.Is(err, store.ErrNotFound) {
		return principal.Principal{}, errNodeToken
	}
	if err != nil {
		return principal.Principal{}, err
	}
	if state == StateRemoved || c.IssuedAtMS <= validAfter.UnixMilli() {
		return principal.Principal{}, errNodeToken
	}
	return principal.Principal{Type: principal.Node, ID: c.Subject}, nil
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
