package artifacts

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/blobstore"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Artifact kinds and source types.
const (
	KindOCI            = "oci"
	KindBlob           = "blob"
	SourceOCIRegistry  = "oci_registry"
	SourceArtifactStor = "artifact_store"
	// SignatureSchemeCosignKey is cosign-compatible key-based signing
	// (tag-based discovery, sha256-<hex>.sig / .att).
	SignatureSchemeCosignKey = "cosign_key"
)

// PublishIntentInput asks for a publish intent.
type PublishIntentInput struct {
	AppSlug            string `json:"app_slug"`
	AppVersion         string `json:"app_version"`
	ArtifactName       string `json:"artifact_name"`
	ArtifactKind       string `json:"artifact_kind"`
	SourceType         string `json:"source_type"`
	Channel            string `json:"channel"`
	SignatureRequired  *bool  `json:"signature_required"`
	SigningKeyID       string `json:"signing_key_id"`
	ProvenanceRequired bool   `json:"provenance_required"`
	TTLSeconds         int    `json:"ttl_seconds"`
}

// Wrapped is a wrapping token and when it stops unwrapping.
type Wrapped struct {
	Token     string
	ExpiresAt time.Time
}

// Intent is an issued publish or pull intent with its one-time material.
type Intent struct {
	ArtifactIntent
	Registry   string
	Wrapped    *Wrapped // OCI: the wrapping token (shown once)
	UploadPath string   // blob publish
	Artifact   *AppArtifact
}

func (s *Service) ttl(seconds int) (time.Duration, error) {
	if seconds == 0 {
		return s.IntentTTL, nil
	}
	d := time.Duration(seconds) * time.Second
	if seconds < 1 || d > MaxIntentTTL {
		return 0, errdefs.Validation([]errdefs.FieldError{{Field: "/ttl_seconds", Code: "out_of_range",
			Message: "must be between 1 and 3600 seconds (omit it for the default)"}})
	}
	return d, nil
}

func actor(ctx context.Context) string { return principal.From(ctx).Key() }

// slotKey validates the app/version/name triple with the blob key grammar
// (the same rules apply to OCI artifacts).
func slotKey(projectID, app, version, name string) (blobstore.Key, error) {
	var fe []errdefs.FieldError
	k := blobstore.Key{ProjectID: projectID, App: app, Version: version, Name: name}
	if strings.TrimSpace(app) == "" || !iam.ValidSlug(app) {
		fe = append(fe, errdefs.FieldError{Field: "/app_slug", Code: "invalid", Message: "must be the app's slug (lowercase letters, digits, '-')"})
	}
	if (blobstore.Key{ProjectID: "p", App: "a", Version: version, Name: "n"}).Validate() != nil {
		fe = append(fe, errdefs.FieldError{Field: "/app_version", Code: "invalid", Message: "must be a version such as 1.2.0 (letters, digits, '.', '_', '+', '-')"})
	}
	if (blobstore.Key{ProjectID: "p", App: "a", Version: "v", Name: name}).Validate() != nil {
		fe = append(fe, errdefs.FieldError{Field: "/artifact_name", Code: "invalid", Message: "must be lowercase letters, digits, '.', '_' or '-', such as runtime or weights"})
	}
	if fe != nil {
		return k, errdefs.Validation(fe)
	}
	return k, nil
}

func kindAndSource(kind, source string) (string, string, error) {
	switch {
	case kind == "" && source == "", kind == KindOCI && (source == "" || source == SourceOCIRegistry), kind == "" && source == SourceOCIRegistry:
		return KindOCI, SourceOCIRegistry, nil
	case kind == KindBlob && (source == "" || source == SourceArtifactStor), kind == "" && source == SourceArtifactStor:
		return KindBlob, SourceArtifactStor, nil
	}
	return "", "", errdefs.Validation([]errdefs.FieldError{{Field: "/artifact_kind", Code: "invalid",
		Message: "artifact_kind/source_type must be oci/oci_registry or blob/artifact_store"}})
}

// CreatePublishIntent issues a publish intent: for OCI the canonical
// repository and wrapped push+pull+delete credentials for it alone; for blobs an
// upload into project storage and the canonical artifact_store:// URI.
func (s *Service) CreatePublishIntent(ctx context.Context, g *iam.Grants, projectID string, in PublishIntentInput) (Intent, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermArtifactWrite)
	if err != nil {
		return Intent{}, err
	}
	key, err := slotKey(p.ID, in.AppSlug, in.AppVersion, in.ArtifactName)
	if err != nil {
		return Intent{}, err
	}
	kind, source, err := kindAndSource(in.ArtifactKind, in.SourceType)
	if err != nil {
		return Intent{}, err
	}
	ttl, err := s.ttl(in.TTLSeconds)
	if err != nil {
		return Intent{}, err
	}
	if len(in.Channel) > 64 {
		return Intent{}, errdefs.Validation([]errdefs.FieldError{{Field: "/channel", Code: "too_long", Message: "must be at most 64 characters"}})
	}
	q := s.Store.Read()
	now := s.Now()
	it := ArtifactIntent{
		ID: iam.NewID(), Kind: "publish", OrgID: p.OrgID, ProjectID: p.ID, ArtifactKind: kind, SourceType: source,
		AppSlug: in.AppSlug, AppVersion: in.AppVersion, ArtifactName: in.ArtifactName, Channel: in.Channel,
		CreatedBy: actor(ctx), CreatedAt: now, ExpiresAt: now.Add(ttl),
	}
	it.CreatorTokenIssuedUS, it.CreatorKeyID = creatorToken(ctx)
	if kind == KindBlob {
		if s.Blobs == nil {
			return Intent{}, errdefs.FailedPrecondition("blob_store_unavailable", "this server has no blob store configured")
		}
		if in.SignatureRequired != nil && *in.SignatureRequired || in.SigningKeyID != "" || in.ProvenanceRequired {
			return Intent{}, errdefs.Validation([]errdefs.FieldError{{Field: "/signature_required", Code: "unsupported",
				Message: "blob artifacts are trusted by their sha256 digest; signatures apply to OCI artifacts only"}})
		}
		if it.SourceURI, err = blobstore.FormatURI(key); err != nil {
			return Intent{}, err
		}
		if it.UploadID, err = s.Blobs.Begin(ctx, key); err != nil {
			return Intent{}, err
		}
		if _, err := s.saveIntent(ctx, it, nil); err != nil {
			_ = s.Blobs.Abort(context.WithoutCancel(ctx), it.UploadID)
			return Intent{}, err
		}
		return Intent{ArtifactIntent: it, UploadPath: key.Path()}, nil
	}

	link, err := s.registry()
	if err != nil {
		return Intent{}, err
	}
	org, err := q.GetOrg(ctx, p.OrgID)
	if err != nil {
		return Intent{}, err
	}
	it.Repository = CanonicalRepository(org.Slug, p.Slug, in.AppSlug)
	if !ValidRepository(it.Repository) {
		return Intent{}, errdefs.Invalid("invalid_repository", "the repository %q derived from the org, project and app slugs is not a valid OCI name", it.Repository)
	}
	it.TagHint = TagHint(in.AppVersion)
	keys, err := q.AllArtifactSigningKeys(ctx, p.ID)
	if err != nil {
		return Intent{}, err
	}
	// Once a project has a signing key, every image it publishes must be
	// signed: a publisher may ask for more checks, never opt out of them.
	it.SignatureRequired = len(keys) > 0
	if in.SignatureRequired != nil {
		if !*in.SignatureRequired && len(keys) > 0 {
			return Intent{}, errdefs.Validation([]errdefs.FieldError{{Field: "/signature_required", Code: "required_by_project",
				Message: "this project has signing keys, so its images must be signed; sign the image (gpuaas artifact push --sign-key) instead of opting out"}})
		}
		it.SignatureRequired = *in.SignatureRequired
	}
	it.ProvenanceRequired = in.ProvenanceRequired
	if in.SigningKeyID != "" {
		if !slices.ContainsFunc(keys, func(k ArtifactSigningKey) bool { return k.ID == in.SigningKeyID }) {
			return Intent{}, errdefs.Validation([]errdefs.FieldError{{Field: "/signing_key_id", Code: "unknown",
				Message: "no signing key with this id is registered in the project; list them with gpuaas artifact signing-key list (GET /api/v1/projects/{project_id}/artifact-signing-keys)"}})
		}
		it.SigningKeyID = in.SigningKeyID
		it.SignatureRequired = true
	}
	if it.ProvenanceRequired {
		it.SignatureRequired = true
	}
	if it.SignatureRequired {
		if len(keys) == 0 {
			return Intent{}, errdefs.FailedPrecondition("no_signing_keys",
				"signatures are required but the project has no signing key; register one with gpuaas artifact signing-key add --project %s (POST /api/v1/projects/%s/artifact-signing-keys)", p.ID, p.ID)
		}
		it.SignatureScheme = SignatureSchemeCosignKey
	}
	// delete: a project frees its registry quota itself (registrydelete.go
	// keeps what the platform relies on).
	wrapped, err := s.saveIntent(ctx, it, link, registry.ActionPush, registry.ActionPull, registry.ActionDelete)
	if err != nil {
		return Intent{}, err
	}
	return Intent{ArtifactIntent: it, Registry: link.host, Wrapped: wrapped}, nil
}

// PullIntentInput asks for a pull intent.
type PullIntentInput struct {
	TTLSeconds int `json:"ttl_seconds"`
}

// CreatePullIntent issues short-lived pull-only credentials (wrapped) for
// one registered OCI artifact, or the download location of a blob. Revoked
// and retired artifacts are refused.
func (s *Service) CreatePullIntent(ctx context.Context, g *iam.Grants, projectID, artifactID string, in PullIntentInput) (Intent, error) {
	p, a, err := s.artifact(ctx, g, projectID, artifactID, iam.PermArtifactRead)
	if err != nil {
		return Intent{}, err
	}
	if !a.RevokedAt.IsZero() {
		return Intent{}, errdefs.FailedPrecondition("artifact_revoked", "artifact %s was revoked (%s); it can no longer be pulled", a.ID, a.RevokeReason)
	}
	if a.LifecycleState == StateRetired {
		return Intent{}, errdefs.FailedPrecondition("artifact_retired", "artifact %s is retired; it can no longer be pulled", a.ID)
	}
	ttl, err := s.ttl(in.TTLSeconds)
	if err != nil {
		return Intent{}, err
	}
	now := s.Now()
	it := ArtifactIntent{
		ID: iam.NewID(), Kind: "pull", OrgID: p.OrgID, ProjectID: p.ID, ArtifactKind: a.ArtifactKind, SourceType: a.SourceType,
		AppSlug: a.AppSlug, AppVersion: a.AppVersion, ArtifactName: a.ArtifactName, Repository: a.Repository, SourceURI: a.SourceURI,
		ArtifactID: a.ID, CreatedBy: actor(ctx), CreatedAt: now, ExpiresAt: now.Add(ttl),
	}
	it.CreatorTokenIssuedUS, it.CreatorKeyID = creatorToken(ctx)
	if a.ArtifactKind == KindBlob {
		if _, err := s.saveIntent(ctx, it, nil); err != nil {
			return Intent{}, err
		}
		return Intent{ArtifactIntent: it, Artifact: &a}, nil
	}
	link, err := s.registry()
	if err != nil {
		return Intent{}, err
	}
	wrapped, err := s.saveIntent(ctx, it, link, registry.ActionPull)
	if err != nil {
		return Intent{}, err
	}
	return Intent{ArtifactIntent: it, Registry: link.host, Wrapped: wrapped, Artifact: &a}, nil
}

// saveIntent stores an intent with its one audit row. With a registry link
// it also issues a registry credential for actions on the intent's
// repository, expiring with the intent, and returns its secret wrapped
// (the wrap lives WrapTTL at most).
func (s *Service) saveIntent(ctx context.Context, it ArtifactIntent, link *registryLink, actions ...string) (*Wrapped, error) {
	var wrapped *Wrapped
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.InsertArtifactIntent(ctx, it); err != nil {
			return err
		}
		if link != nil {
			password := newSecret("gpr_")
			cred := RegistryCredential{ID: iam.NewID(), IntentID: it.ID, ProjectID: it.ProjectID, ArtifactID: it.ArtifactID,
				Repository: it.Repository, Actions: strings.Join(actions, ","), SecretHash: hashSecret(password),
				CreatedAt: it.CreatedAt, ExpiresAt: it.ExpiresAt}
			if err := tx.InsertRegistryCredential(ctx, cred); err != nil {
				return err
			}
			wrapExp := minTime(it.CreatedAt.Add(s.WrapTTL), it.ExpiresAt)
			tok, err := s.Vault.Wrap(ctx, tx, Secret{Username: cred.ID, Password: password, Registry: link.host, Repository: it.Repository,
				Actions: actions, ExpiresAt: cred.ExpiresAt}, wrapExp)
			if err != nil {
				return err
			}
			wrapped = &Wrapped{Token: tok, ExpiresAt: wrapExp}
		}
		return tx.Audit(storage.AuditEvent{Action: "artifact." + it.Kind + "_intent.create", ResourceType: "artifact_intent", ResourceID: it.ID,
			OrgID: it.OrgID, ProjectID: it.ProjectID}, nil, intentAudit(it))
	})
	if err != nil {
		return nil, err
	}
	return wrapped, nil
}

// UnwrapInput carries a wrapping token.
type UnwrapInput struct {
	WrappingToken string `json:"wrapping_token"`
}

// Unwrap exchanges a wrapping token for its registry credentials, once.
// The wrapping token is the capability; the caller only has to be signed in.
func (s *Service) Unwrap(ctx context.Context, g *iam.Grants, in UnwrapInput) (Secret, error) {
	if g == nil || principal.From(ctx).IsZero() {
		return Secret{}, errdefs.Unauthenticated("unauthenticated", "sign in before unwrapping credentials")
	}
	if strings.TrimSpace(in.WrappingToken) == "" {
		return Secret{}, errdefs.Validation([]errdefs.FieldError{{Field: "/wrapping_token", Code: "required", Message: "is required"}})
	}
	if err := s.takeUnwrap(actor(ctx)); err != nil {
		return Secret{}, err
	}
	var (
		sec     Secret
		it      ArtifactIntent
		foreign bool
	)
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		var err error
		if sec, err = s.Vault.Unwrap(ctx, tx, in.WrappingToken); err != nil {
			return err
		}
		// Only the principal that created the intent may unwrap it; the
		// error rolls the consumption back, so the owner can still unwrap.
		if it, err = s.intentOfCredential(ctx, tx, sec.Username); err != nil {
			return err
		}
		if it.CreatedBy != actor(ctx) {
			foreign = true
			return wrapInvalid()
		}
		// The audit names the credential, never the secret.
		return tx.Audit(storage.AuditEvent{Action: "artifact.credentials.unwrap", ResourceType: "registry_credential", ResourceID: sec.Username},
			nil, map[string]any{"repository": sec.Repository, "actions": sec.Actions, "expires_at": sec.ExpiresAt})
	})
	if err != nil {
		if errdefs.KindOf(err) == errdefs.KindFailedPrecondition {
			// A foreign caller gets the unknown-token answer, and the
			// attempt shows in the owning project's audit view.
			ev := storage.AuditEvent{Action: "artifact.credentials.unwrap", ResourceType: "registry_credential"}
			outcome := "failure"
			if foreign {
				ev.OrgID, ev.ProjectID, ev.ResourceID, outcome = it.OrgID, it.ProjectID, sec.Username, "denied"
			}
			if aerr := s.Store.RecordOutcome(ctx, ev, outcome); aerr != nil {
				s.Logger.ErrorContext(ctx, "could not audit a refused unwrap", "err", aerr)
			}
		}
		return Secret{}, err
	}
	return sec, nil
}

// intentOfCredential finds the intent a registry credential was issued for.
func (s *Service) intentOfCredential(ctx context.Context, tx Tx, credentialID string) (ArtifactIntent, error) {
	c, err := tx.GetRegistryCredential(ctx, credentialID)
	if err != nil {
		return ArtifactIntent{}, err
	}
	return tx.GetArtifactIntent(ctx, c.ProjectID, c.IntentID)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func intentAudit(it ArtifactIntent) map[string]any {
	return map[string]any{
		"kind": it.Kind, "artifact_kind": it.ArtifactKind, "app_slug": it.AppSlug, "app_version": it.AppVersion,
		"artifact_name": it.ArtifactName, "repository": it.Repository, "source_uri": it.SourceURI, "artifact_id": it.ArtifactID,
		"signature_required": it.SignatureRequired, "provenance_required": it.ProvenanceRequired, "expires_at": it.ExpiresAt,
	}
}
