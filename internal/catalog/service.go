package catalog

import (
	"log/slog"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/store"
)

// Deps are what the catalog service needs.
type Deps struct {
	DB     *store.DB
	IAM    *iam.Service
	Logger *slog.Logger
	Now    func() time.Time
}

// Service is the catalog domain: apps, versions, manifests, entitlements.
type Service struct{ Deps }

// NewService builds the service.
func NewService(d Deps) *Service {
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Service{Deps: d}
}
