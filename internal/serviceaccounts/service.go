// Package serviceaccounts gives projects machine identities whose keys mint
// short-lived access tokens (RFC 7523 JWT assertions).
//
// An account lives in one project and holds project-scope roles. Its keys are
// key pairs whose private half is returned once and never stored; the holder
// signs a short assertion with it and exchanges that for an access token.
// Every request carrying such a token is checked against the account and the
// key again (CheckServiceAccountToken), so disabling or deleting the account,
// or revoking the key, stops tokens already minted.
package serviceaccounts

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/iam"
)

// Deps are what the service needs.
type Deps struct {
	Store  Store
	IAM    *iam.Service
	Tokens *iam.Tokens
	Logger *slog.Logger
	Now    func() time.Time
	// TokenURL is the audience assertions must name:
	// <public-url>/api/v1/auth/service-account/token. A function because the
	// public URL is known only once the server has bound its port.
	TokenURL func() string
}

// Limits of the domain.
const (
	// MaxActiveKeys is how many keys of one account may be valid at once.
	MaxActiveKeys = 3
	// MaxGracePeriod caps how long a rotated-out key stays valid.
	MaxGracePeriod = 7 * 24 * time.Hour
	// MaxAssertionLifetime caps exp - iat of an assertion.
	MaxAssertionLifetime = time.Hour
	// ClockSkew is the tolerance on iat and exp.
	ClockSkew = 60 * time.Second
	// DefaultRole is granted when a create names no role.
	DefaultRole = iam.RoleAppOperator
	// purgeEvery spaces out the purge of expired assertion ids.
	purgeEvery = time.Minute
)

// Service is the service-account domain.
type Service struct {
	Deps
	lastPurge atomic.Int64 // unix nanoseconds of the last purge of used jtis
	// permsOf is iam.RolePermissions; tests swap it to reach the
	// no-escalation check, which the built-in roles cannot trip.
	permsOf atomic.Pointer[func(role string) []string]
}

// New builds the service.
func New(d Deps) *Service {
	d.Now = clock.Or(d.Now)
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.TokenURL == nil {
		d.TokenURL = func() string { return "" }
	}
	s := &Service{Deps: d}
	f := iam.RolePermissions
	s.permsOf.Store(&f)
	return s
}

var _ iam.ServiceAccountChecker = (*Service)(nil)
