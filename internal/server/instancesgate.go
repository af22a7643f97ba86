package server

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
)

// instancesLaunchGate hands billing's launch check the queries of the
// instances domain's create transaction (a *store.Tx underneath), or the
// database's outside one (a launch preview), until billing joins that
// transaction through its own storage.
type instancesLaunchGate struct {
	db      *store.DB
	billing *billing.Service
}

var _ instances.LaunchGate = instancesLaunchGate{}

func (g instancesLaunchGate) CheckInstance(ctx context.Context, tx storage.Tx, projectID, appSlug string) error {
	q := g.db.Queries()
	if tx != nil {
		q = tx.(*store.Tx).Queries
	}
	return g.billing.CheckInstance(ctx, q, projectID, appSlug)
}
