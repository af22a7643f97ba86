package server

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/store"
)

// The artifacts domain no longer sees *store.Queries; until the instances
// domain moves to its own storage interface, this adapter joins them up.

// instanceUsage answers the artifacts domain's "does a live instance run
// this digest" from the instances domain, outside any transaction (as the
// artifacts service always asked it).
type instanceUsage struct {
	db        *store.DB
	instances *instances.Service
}

func (u instanceUsage) LiveInstancesUsingDigest(ctx context.Context, digest string) (int, error) {
	return u.instances.LiveInstancesUsingDigest(ctx, u.db.Queries(), digest)
}
