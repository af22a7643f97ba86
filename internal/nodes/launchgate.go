package nodes

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// LaunchGate refuses a placement that would take a project over its GPU
// quota or that starts once its spend budget is used up. The billing domain
// implements it (issue 13). It runs inside the placing transaction, before
// the allocation row is written: a refusal rolls everything back, so nothing
// is placed.
type LaunchGate interface {
	// tx is the placing transaction: the gate joins it with its own
	// queries (storage.Store.Join).
	CheckAllocation(ctx context.Context, tx storage.Tx, projectID string, gpus int) error
}

func (s *Service) checkLaunch(ctx context.Context, tx storage.Tx, projectID string, gpus int) error {
	if s.LaunchGate == nil {
		return nil
	}
	return s.LaunchGate.CheckAllocation(ctx, tx, projectID, gpus)
}
