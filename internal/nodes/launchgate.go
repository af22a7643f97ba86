package nodes

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/store"
)

// LaunchGate refuses a placement that would take a project over its GPU
// quota or that starts once its spend budget is used up. The billing domain
// implements it (issue 13). It runs inside the placing transaction, before
// the allocation row is written: a refusal rolls everything back, so nothing
// is placed.
type LaunchGate interface {
	CheckAllocation(ctx context.Context, q *store.Queries, projectID string, gpus int) error
}

// SetLaunchGate installs the gate; safe while serving.
func (s *Service) SetLaunchGate(g LaunchGate) { s.launchGate.Store(&g) }

func (s *Service) checkLaunch(ctx context.Context, q *store.Queries, projectID string, gpus int) error {
	if p := s.launchGate.Load(); p != nil && *p != nil {
		return (*p).CheckAllocation(ctx, q, projectID, gpus)
	}
	return nil
}
