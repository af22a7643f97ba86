package server

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// The artifacts domain no longer sees *store.Queries; until the catalog and
// instances domains move to their own storage interfaces, these adapters
// join them up.

// artifactGate is the catalog's publish gate: the artifacts service reading
// the publish transaction's queries.
type artifactGate struct{ arts *artifacts.Service }

func (g artifactGate) VersionArtifactsReady(ctx context.Context, q *store.Queries, appSlug, version string, expected []manifest.Artifact) error {
	return g.arts.VersionArtifactsReady(ctx, q, appSlug, version, expected)
}

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
