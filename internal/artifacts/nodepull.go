package artifacts

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// CreateNodePullIntent issues a pull intent on behalf of a node, for one
// registered OCI artifact of a project: pull-only credentials for that
// artifact's repository, wrapped, and bound to the node — only that node's
// principal may unwrap them. The control plane calls it when it queues an
// image.pull or container.run task (the user's launch was authorised
// there), so it takes no grants.
func (s *Service) CreateNodePullIntent(ctx context.Context, nodeID, projectID, artifactID string) (Intent, error) {
	if _, err := uuid.Parse(artifactID); err != nil {
		return Intent{}, artifactNotFound(artifactID)
	}
	q := s.Store.Read()
	a, err := q.GetAppArtifact(ctx, projectID, artifactID)
	if errors.Is(err, storage.ErrNotFound) {
		return Intent{}, artifactNotFound(artifactID)
	}
	if err == nil {
		a, err = s.digestRevoked(ctx, a)
	}
	if err != nil {
		return Intent{}, err
	}
	if a.ArtifactKind != KindOCI || a.Digest == "" {
		return Intent{}, errdefs.FailedPrecondition("not_an_image", "artifact %s is not an OCI image pinned by digest; nodes pull images only", a.ID)
	}
	if !a.RevokedAt.IsZero() || a.LifecycleState == StateRetired {
		return Intent{}, errdefs.FailedPrecondition("artifact_unavailable", "artifact %s is revoked or retired; it can no longer be pulled", a.ID)
	}
	link, err := s.registry()
	if err != nil {
		return Intent{}, err
	}
	now := s.Now()
	it := ArtifactIntent{
		ID: iam.NewID(), Kind: "pull", OrgID: a.OrgID, ProjectID: a.ProjectID, ArtifactKind: a.ArtifactKind, SourceType: a.SourceType,
		AppSlug: a.AppSlug, AppVersion: a.AppVersion, ArtifactName: a.ArtifactName, Repository: a.Repository, ArtifactID: a.ID,
		CreatedBy: principal.Principal{Type: principal.Node, ID: nodeID}.Key(), CreatedAt: now, ExpiresAt: now.Add(s.IntentTTL),
	}
	wrapped, err := s.saveIntent(ctx, it, link, "pull")
	if err != nil {
		return Intent{}, err
	}
	return Intent{ArtifactIntent: it, Registry: link.host, Wrapped: wrapped, Artifact: &a}, nil
}

// ImagePull is the image.pull payload of a node pull intent.
func (i Intent) ImagePull() nodeapi.ImagePull {
	p := nodeapi.ImagePull{Repository: i.Registry + "/" + i.Repository, PullIntentID: i.ID}
	if i.Artifact != nil {
		p.Digest = i.Artifact.Digest
	}
	if i.Wrapped != nil {
		p.WrappingToken = i.Wrapped.Token
	}
	return p
}
