package artifacts

import (
	"context"
	"errors"
	"strings"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Registry credentials die with their owner: every registry token request
// re-checks the principal bound to the credential's intent — still present,
// still active, still holding the permission on the project — exactly as
// the REST API re-checks a bearer token on every request. An intent that
// recorded the access token it was created with (CreatorTokenIssuedUS) is
// checked by the REST API's own per-request check (iam.Tokens.Check) on
// that token's claims, so its credentials also end when the token would
// have: the service-account key it was minted with is revoked, or the
// account's tokens_valid_after passes its issue time (a disable, a password
// change), and they stay dead when the account is enabled again.

// TokenChecker is the REST API's per-request check of an access token's
// claims (iam.Tokens.Check).
type TokenChecker interface {
	Check(ctx context.Context, c iam.AccessClaims) (principal.Principal, error)
}

// tokenChecker is the check the REST API runs; nil when the service has no
// IAM (unit tests), which fails intents that recorded a token closed.
func (s *Service) tokenChecker() TokenChecker {
	if s.IAM == nil || s.IAM.Tokens == nil {
		return nil
	}
	return s.IAM.Tokens
}

// creatorToken returns what the request's access token says of itself that
// the REST API re-checks on every request: its issue time in microseconds
// and, for a service account, the key it was minted with. Zero when the
// request carried no user or service-account token of the acting principal.
// A token minted before iat_us existed is recorded as its millisecond issue
// time times 1000, which CutBy orders against a cut-off exactly as it orders
// the milliseconds.
func creatorToken(ctx context.Context) (issuedUS int64, keyID string) {
	c, ok := iam.ClaimsFrom(ctx)
	p := principal.From(ctx)
	if !ok || c.Subject != p.ID || c.Type != string(p.Type) || (p.Type != principal.User && p.Type != principal.ServiceAccount) {
		return 0, ""
	}
	issuedUS = c.IssuedAtUS
	if issuedUS == 0 {
		issuedUS = c.IssuedAtMS * 1000
	}
	return issuedUS, c.KeyID
}

// creatorClaims rebuilds, from what the intent recorded, the claims of the
// token that created it as iam.Tokens.Check reads them.
func creatorClaims(typ principal.Type, id string, it ArtifactIntent) iam.AccessClaims {
	return iam.AccessClaims{RegisteredClaims: jwt.RegisteredClaims{Subject: id}, Type: string(typ),
		IssuedAtMS: it.CreatorTokenIssuedUS / 1000, IssuedAtUS: it.CreatorTokenIssuedUS, KeyID: it.CreatorKeyID}
}

// ownerMay reports whether the principal that created the intent
// (it.CreatedBy, principal.Key form) exists, is active and holds perm in the
// intent's project — and, where the intent recorded the token it was
// created with, whether that token would still pass the REST API's check.
func ownerMay(ctx context.Context, q OwnerReader, tokens TokenChecker, it ArtifactIntent, perm string) (bool, error) {
	typ, id, ok := strings.Cut(it.CreatedBy, ":")
	if !ok || id == "" {
		return false, nil
	}
	var p principal.Principal
	switch t := principal.Type(typ); {
	case it.CreatorTokenIssuedUS != 0 && (t == principal.User || t == principal.ServiceAccount):
		if tokens == nil {
			return false, errors.New("artifacts: no token check to run on the token intent " + it.ID + " was created with")
		}
		var err error
		p, err = tokens.Check(ctx, creatorClaims(t, id, it))
		if errdefs.KindOf(err) == errdefs.KindUnauthenticated {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	case t == principal.User:
		u, err := q.GetUser(ctx, id)
		if errors.Is(err, storage.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if u.Status != iam.UserActive {
			return false, nil
		}
		p = principal.Principal{Type: principal.User, ID: u.ID, Email: u.Email}
	case t == principal.ServiceAccount:
		a, err := q.ArtifactOwnerAccount(ctx, id)
		if errors.Is(err, storage.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if a.Status != serviceaccounts.AccountActive {
			return false, nil
		}
		p = principal.Principal{Type: principal.ServiceAccount, ID: a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID}
	case t == principal.Node:
		// A node holds pull credentials minted for one task's image; it
		// may use them while it is a member of the fleet, and never push.
		state, err := q.ArtifactOwnerNodeState(ctx, id)
		if errors.Is(err, storage.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return state != nodes.StateRemoved && perm == iam.PermArtifactRead, nil
	default:
		return false, nil
	}
	g, err := iam.LoadGrants(ctx, q, p)
	if err != nil {
		return false, err
	}
	return g.Can(perm, iam.Scope{OrgID: it.OrgID, ProjectID: it.ProjectID}), nil
}

// credentialPerm is the permission a credential's actions need.
func credentialPerm(actions string) string {
	for _, a := range strings.Split(actions, ",") {
		if a == "push" {
			return iam.PermArtifactWrite
		}
	}
	return iam.PermArtifactRead
}
