package artifacts

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/nodeapi"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/store"
)

// NodePullTTL bounds the pull credentials a deployment hands a node: long
// enough for a queued task to wait for a busy node, short enough to be
// worthless soon after.
const NodePullTTL = 30 * time.Minute

// NodePull issues pull-only credentials for one OCI artifact to a node, for
// a deployment the platform queues (no caller grants: the launch was
// authorised when it was accepted). It runs in the caller's transaction,
// so the credentials exist exactly when the task that carries them does.
// The node unwraps the single-use token with its own node token.
func (s *Service) NodePull(ctx context.Context, tx *store.Tx, nodeID string, a store.AppArtifact) (nodeapi.ImagePull, error) {
	if !a.RevokedAt.IsZero() {
		return nodeapi.ImagePull{}, errdefs.FailedPrecondition("artifact_revoked", "artifact %s was revoked (%s); it can no longer be pulled", a.ID, a.RevokeReason)
	}
	link, err := s.registry()
	if err != nil {
		return nodeapi.ImagePull{}, err
	}
	now := s.Now()
	it := store.ArtifactIntent{
		ID: iam.NewID(), Kind: "pull", OrgID: a.OrgID, ProjectID: a.ProjectID, ArtifactKind: a.ArtifactKind, SourceType: a.SourceType,
		AppSlug: a.AppSlug, AppVersion: a.AppVersion, ArtifactName: a.ArtifactName, Repository: a.Repository,
		ArtifactID: a.ID, CreatedBy: "node:" + nodeID, CreatedAt: now, ExpiresAt: now.Add(NodePullTTL),
	}
	w, err := s.writeIntent(ctx, tx, it, link, registry.ActionPull)
	if err != nil {
		return nodeapi.ImagePull{}, err
	}
	return nodeapi.ImagePull{Repository: link.host + "/" + a.Repository, Digest: a.Digest, PullIntentID: it.ID, WrappingToken: w.Token}, nil
}
