// Package artifacts owns app artifacts: publish and pull intents, digest
// registration against the real registry or blob store, and the trust and
// promotion lifecycle.
package artifacts

import (
	"log/slog"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/store"
)

// Deps are what the artifacts service needs.
type Deps struct {
	DB     *store.DB
	IAM    *iam.Service
	Logger *slog.Logger
	Now    func() time.Time
}

// Service is the artifacts domain.
type Service struct{ Deps }

// New builds the service.
func New(d Deps) *Service {
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Service{Deps: d}
}
