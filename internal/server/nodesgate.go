package server

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
)

// nodesLaunchGate hands billing's launch check the queries of the nodes
// domain's placing transaction (a *store.Tx underneath), until billing
// joins that transaction through its own storage.
type nodesLaunchGate struct{ billing *billing.Service }

var _ nodes.LaunchGate = nodesLaunchGate{}

func (g nodesLaunchGate) CheckAllocation(ctx context.Context, tx storage.Tx, projectID string, gpus int) error {
	return g.billing.CheckAllocation(ctx, tx.(*store.Tx).Queries, projectID, gpus)
}
