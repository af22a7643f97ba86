// Package serviceaccounts gives projects machine identities whose keys mint
// short-lived access tokens (RFC 7523 JWT assertions).
package serviceaccounts

import (
	"log/slog"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/store"
)

// Deps are what the service needs.
type Deps struct {
	DB     *store.DB
	IAM    *iam.Service
	Tokens *iam.Tokens
	Logger *slog.Logger
	Now    func() time.Time
	// TokenURL is the audience assertions must name: <public-url>/api/v1/auth/service-account/token.
	TokenURL string
}

// Service is the service-account domain.
type Service struct{ Deps }

// New builds the service.
func New(d Deps) *Service {
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Service{Deps: d}
}
