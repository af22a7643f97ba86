package instances

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/nodeapi"
	"github.com/gpuaas/gpuaas/internal/store"
)

// Test hooks: the node lifecycle consequences, called as the nodes domain would.
// FailNode is failNode for tests.
func (s *Service) FailNode(ctx context.Context, tx *store.Tx, nodeID string) error {
	return s.failNode(ctx, tx, nodeID)
}

// RecoverNode is recoverNode for tests.
func (s *Service) RecoverNode(ctx context.Context, tx *store.Tx, nodeID string, w []nodeapi.Workload) error {
	return s.recoverNode(ctx, tx, nodeID, w)
}
