package instances

import (
	"context"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Test hooks: the node lifecycle consequences, called as the nodes domain would.
// FailNode is failNode for tests.
func (s *Service) FailNode(ctx context.Context, tx storage.Tx, nodeID string) error {
	return s.failNode(ctx, s.Store.Join(tx), nodeID)
}

// RecoverNode is recoverNode for tests.
func (s *Service) RecoverNode(ctx context.Context, tx storage.Tx, nodeID string, w []nodeapi.Workload) error {
	return s.recoverNode(ctx, s.Store.Join(tx), nodeID, w)
}

// HoldMemberGPUsForTest is holdMemberGPUs for tests.
func HoldMemberGPUsForTest(ctx context.Context, tx Tx, insert []InstanceMember, a Allocation) error {
	return holdMemberGPUs(ctx, tx, insert, a)
}
