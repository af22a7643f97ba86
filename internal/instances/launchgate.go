package instances

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// LaunchGate refuses an app instance launch once its project has used up
// its spend budget. The billing domain implements it (issue 13). It runs in
// the transaction that records the instance, before the row is written: a
// refusal leaves nothing behind. tx is that transaction; nil when a launch
// preview checks outside any.
type LaunchGate interface {
	// tx is the recording transaction: the gate joins it with its own
	// queries (storage.Store.Join). A nil tx checks outside any
	// transaction (a launch preview).
	CheckInstance(ctx context.Context, tx storage.Tx, projectID, appSlug string) error
}

func (s *Service) checkLaunch(ctx context.Context, tx storage.Tx, projectID, appSlug string) error {
	if s.LaunchGate == nil {
		return nil
	}
	return s.LaunchGate.CheckInstance(ctx, tx, projectID, appSlug)
}
