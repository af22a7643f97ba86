package iam

import (
	"context"
	"errors"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Access tokens are EdDSA JWTs carrying only who the bearer is. What the
// bearer may do is read from the database on every request, so a revoked
// role, a disabled account or a revoked key takes effect at once.
const (
	TokenIssuer   = "gpuaas"
	TokenAudience = "gpuaas-api"
)

// AccessClaims are the claims of a gpuaas access token.
type AccessClaims struct {
	jwt.RegisteredClaims
	Type       string `json:"typ"`              // user | service_account
	IssuedAtMS int64  `json:"iat_ms"`           // millisecond issue time, for revocation cut-offs
	IssuedAtUS int64  `json:"iat_us,omitempty"` // the same in microseconds (CutBy)
	ProjectID  string `json:"prj,omitempty"`    // service accounts: their project
	KeyID      string `json:"sak,omitempty"`    // service accounts: the key the token was minted with
}

// CutBy reports whether a revocation cut-off at validAfter ends the token:
// it was issued (as IssueChecked counts it) at or before the cut, and a
// token issued with the cut is taken for one issued before it. Compared in
// microseconds, as the store keeps a cut-off: in milliseconds a sign-in
// right after an account is enabled again (which cuts) would too often
// share the cut's millisecond and get a token that is dead at once. A
// token minted before iat_us existed compares in milliseconds.
func (c AccessClaims) CutBy(validAfter time.Time) bool {
	if c.IssuedAtUS != 0 {
		return c.IssuedAtUS <= validAfter.UnixMicro()
	}
	return c.IssuedAtMS <= validAfter.UnixMilli()
}

type claimsKey struct{}

// WithClaims returns ctx carrying the claims of the access token the
// request was authenticated with.
func WithClaims(ctx context.Context, c AccessClaims) context.Context {
	return context.WithValue(ctx, claimsKey{}, c)
}

// ClaimsFrom returns the claims WithClaims put in ctx, if any.
func ClaimsFrom(ctx context.Context) (AccessClaims, bool) {
	c, ok := ctx.Value(claimsKey{}).(AccessClaims)
	return c, ok
}

// ServiceAccountChecker confirms a service-account token is still good: the
// account exists and is enabled, and the key it was minted with is not
// revoked. The service-account domain implements it.
type ServiceAccountChecker interface {
	CheckServiceAccountToken(ctx context.Context, c AccessClaims) (principal.Principal, error)
}

// NodeChecker confirms a node token is still good: the node exists, is not
// removed, and the token postdates its last credential cut-off. The nodes
// domain implements it.
type NodeChecker interface {
	CheckNodeToken(ctx context.Context, c AccessClaims) (principal.Principal, error)
}

// Tokens issues and verifies access tokens.
type Tokens struct {
	Ring     *Keyring
	UserTTL  time.Duration
	SATTL    time.Duration
	sa       ServiceAccountChecker // CheckServiceAccountsWith
	node     NodeChecker           // CheckNodesWith
	NodeTTL  time.Duration         // node tokens; SATTL when zero
	Now      func() time.Time
	Users    Queries // reads only
	parser   *jwt.Parser
	audience string
}

// NewTokens builds the token service.
func NewTokens(users Queries, ring *Keyring, userTTL, saTTL time.Duration, now func() time.Time) *Tokens {
	now = clock.Or(now)
	return &Tokens{
		Ring: ring, UserTTL: userTTL, SATTL: saTTL, Now: now, Users: users,
		parser: jwt.NewParser(jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithIssuer(TokenIssuer),
			jwt.WithAudience(TokenAudience), jwt.WithExpirationRequired(), jwt.WithTimeFunc(now), jwt.WithLeeway(5*time.Second)),
	}
}

// Issued is a freshly minted access token.
type Issued struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
}

// Issue mints a token for p. keyID is the service-account key used (if any).
func (t *Tokens) Issue(p principal.Principal, keyID string) (Issued, error) {
	return t.IssueChecked(p, keyID, time.Time{})
}

// IssueChecked mints a token for p whose account was found fit to have one
// as read at checked: the token counts as issued then for revocation
// (iat_ms), so a disable or a password change that commits between that
// read and the minting (a password check takes a tenth of a second) cuts
// it too. Zero checked, or one after now, is now.
func (t *Tokens) IssueChecked(p principal.Principal, keyID string, checked time.Time) (Issued, error) {
	now := t.Now()
	if checked.IsZero() || checked.After(now) {
		checked = now
	}
	ttl := t.UserTTL
	switch p.Type {
	case principal.ServiceAccount:
		ttl = t.SATTL
	case principal.Node:
		ttl = t.SATTL
		if t.NodeTTL > 0 {
			ttl = t.NodeTTL
		}
	}
	c := AccessClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: TokenIssuer, Subject: p.ID, Audience: jwt.ClaimStrings{TokenAudience},
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)), ID: uuid.NewString(),
		},
		Type: string(p.Type), IssuedAtMS: checked.UnixMilli(), IssuedAtUS: checked.UnixMicro(), ProjectID: p.ProjectID, KeyID: keyID,
	}
	s, err := t.Ring.Sign(c)
	if err != nil {
		return Issued{}, err
	}
	return Issued{AccessToken: s, TokenType: "Bearer", ExpiresIn: int(ttl.Seconds())}, nil
}

// Why a token that verified once no longer does: the cause of the 401 an
// authentication returns (errors.Is), for an open event stream to name the
// reason it ends. The REST answer is the same invalid_token for every one.
var (
	ErrTokenExpired    = errors.New("token_expired")
	ErrTokenRevoked    = errors.New("token_revoked")
	ErrAccountDisabled = errors.New("account_disabled")
	ErrAccountDeleted  = errors.New("account_deleted")
)

var errBadToken = BadToken(nil)

// BadToken is the 401 for a token that is invalid, expired or revoked, with
// why (one of the Err* reasons above, or nil) as its cause.
func BadToken(why error) error {
	e := errdefs.Unauthenticated("invalid_token", "the access token is invalid, expired or revoked; sign in again")
	if why != nil {
		e = e.WithCause(why)
	}
	return e
}

// Claims verifies a bearer token like Authenticate and also returns its
// claims (a stream ends at their expiry).
func (t *Tokens) Claims(ctx context.Context, raw string) (principal.Principal, AccessClaims, error) {
	var c AccessClaims
	if _, err := t.parser.ParseWithClaims(raw, &c, t.Ring.Keyfunc); err != nil {
		if errors.Is(err, jwt.ErrTokenUnverifiable) {
			// Perhaps another replica rotated keys: reload, at most every
			// few seconds.
			if t.Ring.ReloadIfStale(ctx) {
				if _, err2 := t.parser.ParseWithClaims(raw, &c, t.Ring.Keyfunc); err2 == nil {
					p, err := t.Check(ctx, c)
					return p, c, err
				}
			}
		}
		if errors.Is(err, jwt.ErrTokenExpired) {
			return principal.Principal{}, c, BadToken(ErrTokenExpired)
		}
		return principal.Principal{}, c, errBadToken
	}
	p, err := t.Check(ctx, c)
	return p, c, err
}

// CheckServiceAccountsWith names the domain that vouches for
// service-account tokens. The service-account domain is built after the
// tokens it mints with, so it registers here, once: a second registration
// is a wiring bug and panics rather than silently replacing the first.
func (t *Tokens) CheckServiceAccountsWith(c ServiceAccountChecker) {
	if t.sa != nil {
		panic("iam: a service-account checker is already registered")
	}
	t.sa = c
}

// CheckNodesWith names the domain that vouches for node tokens, once (see
// CheckServiceAccountsWith).
func (t *Tokens) CheckNodesWith(c NodeChecker) {
	if t.node != nil {
		panic("iam: a node checker is already registered")
	}
	t.node = c
}

// Authenticate verifies a bearer token and returns its principal.
func (t *Tokens) Authenticate(ctx context.Context, raw string) (principal.Principal, error) {
	p, _, err := t.Claims(ctx, raw)
	return p, err
}

// Check is the check every request runs on a token that verified (its
// signature and expiry): the account still exists and is enabled, the token
// is not cut off by the account's tokens_valid_after, and a service
// account's key is not revoked. What outlives the request that a token
// authenticated (registry credentials handed out to it) runs it again, on
// the claims it recorded, so that it ends when the token would have.
func (t *Tokens) Check(ctx context.Context, c AccessClaims) (principal.Principal, error) {
	q := t.Users
	switch c.Type {
	case string(principal.User):
		u, err := q.GetUser(ctx, c.Subject)
		if err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return principal.Principal{}, BadToken(ErrAccountDeleted)
			}
			return principal.Principal{}, err
		}
		if u.Status != UserActive {
			return principal.Principal{}, BadToken(ErrAccountDisabled)
		}
		if c.CutBy(u.TokensValidAfter) {
			return principal.Principal{}, BadToken(ErrTokenRevoked)
		}
		return principal.Principal{Type: principal.User, ID: u.ID, Email: u.Email}, nil
	case string(principal.ServiceAccount):
		if t.sa == nil {
			return principal.Principal{}, errBadToken
		}
		return t.sa.CheckServiceAccountToken(ctx, c)
	case string(principal.Node):
		if t.node == nil {
			return principal.Principal{}, errBadToken
		}
		return t.node.CheckNodeToken(ctx, c)
	}
	return principal.Principal{}, errBadToken
}
