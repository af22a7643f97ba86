package artifacts

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/blobstore"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// RegisterInput registers a pushed digest or an uploaded blob.
type RegisterInput struct {
	AppSlug         string          `json:"app_slug"`
	AppVersion      string          `json:"app_version"`
	ArtifactName    string          `json:"artifact_name"`
	ArtifactKind    string          `json:"artifact_kind"`
	SourceType      string          `json:"source_type"`
	Repository      string          `json:"repository"`
	Digest          string          `json:"digest"`
	Tag             string          `json:"tag"`
	MediaType       string          `json:"media_type"`
	SourceURI       string          `json:"source_uri"`
	SourceMetadata  json.RawMessage `json:"source_metadata"`
	PublishIntentID string          `json:"publish_intent_id"`
}

// Register records an artifact after checking the real registry (the
// manifest exists at that digest, with that media type, in the project's
// repository) or the real storage object (exists, digest matches).
func (s *Service) Register(ctx context.Context, g *iam.Grants, projectID string, in RegisterInput) (AppArtifact, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermArtifactWrite)
	if err != nil {
		return AppArtifact{}, err
	}
	if _, err := slotKey(p.ID, in.AppSlug, in.AppVersion, in.ArtifactName); err != nil {
		return AppArtifact{}, err
	}
	kind, source, err := kindAndSource(in.ArtifactKind, in.SourceType)
	if err != nil {
		return AppArtifact{}, err
	}
	if in.Digest == "" {
		msg := "is required: the control plane only trusts immutable digests"
		if in.Tag != "" {
			msg += "; a tag alone is a mutable label — register the sha256 digest your push reported"
		}
		return AppArtifact{}, errdefs.Validation([]errdefs.FieldError{{Field: "/digest", Code: "required", Message: msg}})
	}
	if _, err := ParseDigest(in.Digest); err != nil {
		return AppArtifact{}, err
	}
	var meta []byte
	if len(in.SourceMetadata) > 0 && string(in.SourceMetadata) != "null" {
		var m map[string]any
		if json.Unmarshal(in.SourceMetadata, &m) != nil || len(in.SourceMetadata) > 16<<10 {
			return AppArtifact{}, errdefs.Validation([]errdefs.FieldError{{Field: "/source_metadata", Code: "invalid", Message: "must be a JSON object of at most 16 KiB"}})
		}
		meta = in.SourceMetadata
	}
	q := s.Store.Read()
	// Checked first so that a revoked digest is refused whatever the
	// registry holds, and again inside the insert's transaction.
	if err := refuseRevokedDigest(ctx, q, p.ID, in.Digest); err != nil {
		return AppArtifact{}, err
	}
	var it ArtifactIntent
	if in.PublishIntentID != "" {
		if _, perr := uuid.Parse(in.PublishIntentID); perr == nil {
			it, err = q.GetArtifactIntent(ctx, p.ID, in.PublishIntentID)
		} else {
			err = storage.ErrNotFound
		}
		if err == nil && (it.Kind != "publish" || it.AppSlug != in.AppSlug || it.AppVersion != in.AppVersion || it.ArtifactName != in.ArtifactName || it.ArtifactKind != kind) {
			return AppArtifact{}, errdefs.Unprocessable("intent_mismatch", "publish intent %s is for %s/%s/%s (%s), not this artifact", it.ID, it.AppSlug, it.AppVersion, it.ArtifactName, it.ArtifactKind)
		}
	} else {
		it, err = q.LatestPublishIntent(ctx, p.ID, in.AppSlug, in.AppVersion, in.ArtifactName, kind)
	}
	if errors.Is(err, storage.ErrNotFound) {
		return AppArtifact{}, errdefs.FailedPrecondition("publish_intent_required",
			"no publish intent exists for %s %s artifact %q in this project; gpuaas artifact push does all three (request one at POST /api/v1/projects/%s/app-artifacts/publish-intents, push, then register)",
			in.AppSlug, in.AppVersion, in.ArtifactName, p.ID)
	}
	if err != nil {
		return AppArtifact{}, err
	}
	now := s.Now()
	a := AppArtifact{
		ID: iam.NewID(), OrgID: p.OrgID, ProjectID: p.ID, AppSlug: in.AppSlug, AppVersion: in.AppVersion, ArtifactName: in.ArtifactName,
		ArtifactKind: kind, SourceType: source, Digest: in.Digest, SourceMetadata: meta, PublishIntentID: it.ID,
		LifecycleState: StateDraft, TrustState: TrustUnverified, SignatureRequired: it.SignatureRequired, SignatureScheme: it.SignatureScheme,
		SigningKeyID: it.SigningKeyID, ProvenanceRequired: it.ProvenanceRequired, CreatedBy: actor(ctx), CreatedAt: now, UpdatedAt: now,
	}
	if kind == KindOCI {
		release, err := s.holdCheckedManifest(ctx, it, in, &a)
		if err != nil {
			return AppArtifact{}, err
		}
		defer release()
	} else {
		if err := s.checkBlob(ctx, p.ID, it, in, &a); err != nil {
			return AppArtifact{}, err
		}
	}
	if f := s.registerChecked.Load(); f != nil {
		(*f)(ctx, a)
	}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		if err := refuseRevokedDigest(ctx, tx, a.ProjectID, a.Digest); err != nil {
			return err
		}
		if kind == KindBlob {
			if err := claimBlob(ctx, tx, a); err != nil {
				return err
			}
		}
		if err := tx.InsertAppArtifact(ctx, a); err != nil {
			if errors.Is(err, storage.ErrAlreadyExists) {
				return errdefs.AlreadyExists("artifact_already_registered",
					"%s %s already has a registered artifact %q in this project; artifacts are immutable — revoke it first or publish a new version",
					a.AppSlug, a.AppVersion, a.ArtifactName)
			}
			return err
		}
		if err := emit(tx, "artifact.register", "", a); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "artifact.register", ResourceType: "app_artifact", ResourceID: a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID},
			nil, stateOf(a))
	})
	if err != nil {
		return AppArtifact{}, err
	}
	return a, nil
}

// claimBlob turns the committed upload of a blob artifact's content into
// the artifact (whose size_bytes counts it against the quota from now on).
// The claim deletes the upload's row, which the sweeper holds while it
// removes unregistered content: whichever comes first wins, and content
// the sweeper took is refused here, never registered without its bytes.
// Content with no row at all was committed before uploads were recorded.
func claimBlob(ctx context.Context, tx Tx, a AppArtifact) error {
	n, err := tx.ClaimCommittedBlob(ctx, a.ProjectID, a.SourceURI, a.Digest)
	if err != nil || n > 0 {
		return err
	}
	swept, err := tx.BlobContentSwept(ctx, a.ProjectID, a.SourceURI, a.Digest)
	if err != nil {
		return err
	}
	if swept {
		return errdefs.Unprocessable("object_not_found",
			"the content at %s was removed because it was not registered within %s of its upload; request a new publish intent, upload it again and register it right after the commit", a.SourceURI, AbandonedUploadAge)
	}
	return nil
}

// refuseRevokedDigest answers 422 digest_revoked when digest was revoked
// in the project: revocation is of the content, not of one record.
func refuseRevokedDigest(ctx context.Context, q Queries, projectID, digest string) error {
	revoked, err := q.DigestRevoked(ctx, projectID, digest)
	if err != nil {
		return err
	}
	if revoked {
		return errdefs.Unprocessable("digest_revoked",
			"digest %s was revoked in this project; revocation is permanent for the content, so it cannot be registered again — build and push a new image", digest)
	}
	return nil
}

// holdCheckedManifest checks the manifest of an OCI registration
// (checkManifest) under the hold that keeps it as checked until the
// artifact is recorded; release ends the hold. The hold is the digest's,
// which the registry's content gate holds over a delete's check and the
// delete: a registered manifest is one the registry holds. An image index
// is checked again under its repository's IndexesKey as well, held
// exclusively, which every manifest delete in the repository holds
// shared: none of the manifests it references goes between the check that
// they all exist and the record. Only an index takes the repository's
// key, so other registrations and deletes in the repository do not wait
// on each other; it is known to be one only once the registry answered,
// hence the second check.
func (s *Service) holdCheckedManifest(ctx context.Context, it ArtifactIntent, in RegisterInput, a *AppArtifact) (release func(), err error) {
	keys := []registry.Key{registry.DigestKey(it.Repository, in.Digest)}
	for {
		release, err := s.holdKeys(ctx, keys...)
		if err != nil {
			return nil, err
		}
		err = func() (err error) {
			// Released on every way out but success, a panic too: a hold
			// left behind would stop every delete in the repository.
			defer func() {
				if p := recover(); p != nil {
					release()
					panic(p)
				}
				if err != nil {
					release()
				}
			}()
			return s.checkManifest(ctx, it, in, a, len(keys) > 1)
		}()
		if err == nil {
			return release, nil
		}
		if !errors.Is(err, errIndexesNotHeld) {
			return nil, err
		}
		keys = append(keys, registry.IndexesKey(it.Repository))
	}
}

// errIndexesNotHeld is checkManifest's answer for an image index checked
// without its repository's IndexesKey held.
var errIndexesNotHeld = errors.New("artifacts: an image index is checked under its repository's indexes key")

// checkManifest checks what the registry holds at in's digest and records
// it in a. indexesHeld says whether the repository's IndexesKey is held;
// an image index is not checked without it (errIndexesNotHeld).
func (s *Service) checkManifest(ctx context.Context, it ArtifactIntent, in RegisterInput, a *AppArtifact, indexesHeld bool) error {
	if in.SourceURI != "" {
		return errdefs.Validation([]errdefs.FieldError{{Field: "/source_uri", Code: "unexpected", Message: "is for blob artifacts; OCI artifacts name a repository and digest"}})
	}
	if in.Repository == "" {
		in.Repository = it.Repository
	}
	repo := in.Repository
	if link := s.reg.Load(); link != nil {
		repo = strings.TrimPrefix(repo, link.host+"/")
	}
	if repo != it.Repository {
		return errdefs.Unprocessable("repository_not_owned",
			"repository %q is not this project's repository for app %q; push to and register %q, the repository of the publish intent",
			in.Repository, it.AppSlug, it.Repository)
	}
	if in.Tag != "" && !ValidTag(in.Tag) {
		return errdefs.Validation([]errdefs.FieldError{{Field: "/tag", Code: "invalid", Message: "must be a valid OCI tag ([A-Za-z0-9_][A-Za-z0-9._-]{0,127})"}})
	}
	link, err := s.registry()
	if err != nil {
		return err
	}
	mt, size, err := link.reg.ManifestExists(ctx, repo, in.Digest)
	switch e, _ := errdefs.As(err); {
	case e != nil && e.Code == registry.CodeNotAManifest:
		return errdefs.Unprocessable("manifest_not_found",
			"%s in %s is a blob (an image layer or config), not a manifest; register the digest of the image manifest (or index) your push reported", in.Digest, repo)
	case errors.Is(err, registry.ErrNotFound):
		return errdefs.Unprocessable("manifest_not_found",
			"the registry holds no manifest %s in %s; push the image with the intent's credentials first, then register the digest the push reported", in.Digest, repo)
	case err != nil:
		return err
	}
	if in.MediaType != "" && in.MediaType != mt {
		return errdefs.Unprocessable("media_type_mismatch", "the manifest at %s has media type %q, not %q", in.Digest, mt, in.MediaType)
	}
	if registry.IndexMediaType(mt) {
		if !indexesHeld {
			return errIndexesNotHeld
		}
		// A publisher may delete manifests: an index whose images went is
		// not an image the registry can serve.
		kids, err := link.reg.IndexManifests(ctx, repo, in.Digest)
		if err != nil {
			return err
		}
		for _, kid := range kids {
			_, _, err := link.reg.ManifestExists(ctx, repo, kid)
			if errors.Is(err, registry.ErrNotFound) {
				return errdefs.Unprocessable("index_incomplete",
					"the image index %s references manifest %s, which %s no longer holds (deleted); push the index again with all its images, then register the digest the push reports", in.Digest, kid, repo)
			}
			if err != nil {
				return err
			}
		}
	}
	if in.Tag != "" {
		got, err := link.reg.ResolveTag(ctx, repo, in.Tag)
		switch {
		case errors.Is(err, registry.ErrNotFound):
			return errdefs.Unprocessable("tag_mismatch", "tag %q does not exist in %s; push it, or register the digest without a tag", in.Tag, repo)
		case err != nil:
			return err
		case got != in.Digest:
			return errdefs.Unprocessable("tag_mismatch", "tag %q in %s points at %s, not %s; a tag is recorded only when it names the registered digest", in.Tag, repo, got, in.Digest).
				WithDetails(map[string]any{"tag": in.Tag, "tag_digest": got})
		}
	}
	a.Repository, a.Tag, a.MediaType, a.SizeBytes = repo, in.Tag, mt, size
	return nil
}

func (s *Service) checkBlob(ctx context.Context, projectID string, it ArtifactIntent, in RegisterInput, a *AppArtifact) error {
	if in.Repository != "" || in.Tag != "" {
		return errdefs.Validation([]errdefs.FieldError{{Field: "/repository", Code: "unexpected", Message: "is for OCI artifacts; blob artifacts name a source_uri and digest"}})
	}
	if s.Blobs == nil {
		return errdefs.FailedPrecondition("blob_store_unavailable", "this server has no blob store configured")
	}
	if in.SourceURI == "" {
		in.SourceURI = it.SourceURI
	}
	key, err := blobstore.ParseURI(in.SourceURI)
	if err != nil {
		return errdefs.Validation([]errdefs.FieldError{{Field: "/source_uri", Code: "invalid",
			Message: "must be artifact_store://projects/<project_id>/artifacts/<app>/<version>/<name>, as returned by the publish intent"}})
	}
	if key.ProjectID != projectID || key.App != in.AppSlug || key.Version != in.AppVersion || key.Name != in.ArtifactName {
		return errdefs.Unprocessable("source_not_owned", "source_uri %q is not this project's storage location for %s %s %q; use %q from the publish intent",
			in.SourceURI, in.AppSlug, in.AppVersion, in.ArtifactName, it.SourceURI)
	}
	obj, err := s.Blobs.Stat(ctx, key)
	if errors.Is(err, blobstore.ErrNotFound) {
		return errdefs.Unprocessable("object_not_found", "nothing is stored at %s yet; upload it (and commit with its digest) first", in.SourceURI)
	}
	if err != nil {
		return err
	}
	if obj.Digest != in.Digest {
		return errdefs.Unprocessable("digest_mismatch", "the object at %s has digest %s, not %s", in.SourceURI, obj.Digest, in.Digest)
	}
	a.SourceURI, a.SizeBytes, a.MediaType = in.SourceURI, obj.Size, in.MediaType
	if a.MediaType == "" {
		a.MediaType = "application/octet-stream"
	}
	return nil
}

// stateOf is what an audit row records about an artifact before and after.
func stateOf(a AppArtifact) map[string]any {
	return map[string]any{
		"lifecycle_state": string(a.LifecycleState), "trust_state": string(a.TrustState), "trust_reason": a.TrustReason,
		"revoked": !a.RevokedAt.IsZero(), "repository": a.Repository, "source_uri": a.SourceURI, "digest": a.Digest,
		"app_slug": a.AppSlug, "app_version": a.AppVersion, "artifact_name": a.ArtifactName,
	}
}
