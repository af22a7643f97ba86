package artifacts

import (
	"context"
	"time"
)

// RecountRegistries runs one pass of the registry recount job.
func (s *Service) RecountRegistries(ctx context.Context) error { return s.recountRegistries(ctx) }

// AttachRecountReader attaches a registry whose recounts read the
// manifests' references through read, in place of the registry's storage,
// each project's recount bounded by timeout.
func (s *Service) AttachRecountReader(timeout time.Duration, read func(ctx context.Context, repositories []string, limit int) (map[string]bool, error)) {
	s.reg.Store(&registryLink{referencedBlobs: read, recountTimeout: timeout})
}
