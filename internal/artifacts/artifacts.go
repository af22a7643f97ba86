package artifacts

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/blobstore"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/signature"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// InstanceUsage is implemented by the instances domain: retiring an
// artifact, or deleting its manifest from the registry, is refused while a
// live instance of its app uses its digest.
type InstanceUsage interface {
	// LiveInstancesUsingDigest counts live (not decommissioned) instances
	// of the app appSlug that run digest, reading the instances domain's
	// own storage in tx (the retire's transaction), or outside any
	// transaction when tx is nil. Only the app's own instances count: an
	// instance of another app (another tenant's) that runs the same
	// content pulls it from its own repository.
	LiveInstancesUsingDigest(ctx context.Context, tx storage.Tx, appSlug, digest string) (int, error)
}

func artifactNotFound(id string) error {
	return errdefs.NotFound("artifact_not_found", "artifact %q does not exist in this project", id)
}

// artifact resolves a project the caller may see with perm, and one of its artifacts.
func (s *Service) artifact(ctx context.Context, g *iam.Grants, projectID, artifactID, perm string) (iam.Project, AppArtifact, error) {
	p, err := s.IAM.Project(ctx, g, projectID, perm)
	if err != nil {
		return iam.Project{}, AppArtifact{}, err
	}
	if _, err := uuid.Parse(artifactID); err != nil {
		return iam.Project{}, AppArtifact{}, artifactNotFound(artifactID)
	}
	a, err := s.Store.Read().GetAppArtifact(ctx, p.ID, artifactID)
	if errors.Is(err, storage.ErrNotFound) {
		return iam.Project{}, AppArtifact{}, artifactNotFound(artifactID)
	}
	if err != nil {
		return iam.Project{}, AppArtifact{}, err
	}
	if a, err = s.digestRevoked(ctx, a); err != nil {
		return iam.Project{}, AppArtifact{}, err
	}
	return p, a, nil
}

// digestRevoked shows a as revoked when its digest was revoked in the
// project. Revoke already revokes every record of the digest; this covers a
// record whose registration raced the revoke, so every gate that reads an
// artifact through here (promote, verify, pull intents) refuses it too.
func (s *Service) digestRevoked(ctx context.Context, a AppArtifact) (AppArtifact, error) {
	if !a.RevokedAt.IsZero() || a.Digest == "" {
		return a, nil
	}
	at, reason, err := s.Store.Read().DigestRevocation(ctx, a.ProjectID, a.Digest)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return a, nil
	case err != nil:
		return a, err
	}
	a.RevokedAt, a.RevokeReason = at, reason
	return a, nil
}

// Get returns one artifact.
func (s *Service) Get(ctx context.Context, g *iam.Grants, projectID, artifactID string) (AppArtifact, error) {
	_, a, err := s.artifact(ctx, g, projectID, artifactID, iam.PermArtifactRead)
	return a, err
}

// List lists a project's artifacts.
func (s *Service) List(ctx context.Context, g *iam.Grants, projectID string, f AppArtifactFilter, pg storage.Page) ([]AppArtifact, string, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermArtifactRead)
	if err != nil {
		return nil, "", err
	}
	if f.LifecycleState != "" && !ValidState(f.LifecycleState) {
		return nil, "", errdefs.Invalid("invalid_filter", "state must be one of draft, staged, canary, active, deprecated, retired")
	}
	if f.TrustState != "" && !ValidTrust(f.TrustState) {
		return nil, "", errdefs.Invalid("invalid_filter", "trust_state must be unverified, verified or failed")
	}
	return s.Store.Read().ListAppArtifacts(ctx, p.ID, f, pg)
}

// TransitionInput is the body of promote, deprecate, retire and revoke.
type TransitionInput struct {
	TargetState LifecycleState `json:"target_state"`
	Reason      string         `json:"reason"`
}

func requireReason(reason string) error {
	if strings.TrimSpace(reason) == "" {
		return errdefs.Validation([]errdefs.FieldError{{Field: "/reason", Code: "required", Message: "say why: the reason is recorded in the audit log"}})
	}
	if len(reason) > 1024 {
		return errdefs.Validation([]errdefs.FieldError{{Field: "/reason", Code: "too_long", Message: "must be at most 1024 characters"}})
	}
	return nil
}

// transition applies change to an artifact in one audited transaction; the
// update only lands if nobody transitioned the artifact meanwhile.
func (s *Service) transition(ctx context.Context, action, reason string, a AppArtifact, change func(*AppArtifact)) (AppArtifact, error) {
	return s.transitionWith(ctx, action, reason, a, change, nil)
}

// transitionWith is transition with also run in the same transaction after
// the update; what also returns is added to the audit row's after state.
func (s *Service) transitionWith(ctx context.Context, action, reason string, a AppArtifact, change func(*AppArtifact),
	also func(context.Context, Tx, AppArtifact) (map[string]any, error)) (AppArtifact, error) {
	before := a
	change(&a)
	a.UpdatedAt = s.Now()
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.UpdateAppArtifactState(ctx, a, before.LifecycleState, before.TrustState, !before.RevokedAt.IsZero()); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return errdefs.Conflict("artifact_changed", "artifact %s changed while this request ran; read it again and retry", a.ID)
			}
			return err
		}
		if err := emit(tx, action, reason, a); err != nil {
			return err
		}
		after := stateOf(a)
		if also != nil {
			extra, err := also(ctx, tx, a)
			if err != nil {
				return err
			}
			maps.Copy(after, extra)
		}
		return tx.Audit(storage.AuditEvent{Action: action, ResourceType: "app_artifact", ResourceID: a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID, Reason: reason},
			stateOf(before), after)
	})
	if err != nil {
		return AppArtifact{}, err
	}
	return a, nil
}

func refuseRevoked(a AppArtifact) error {
	if !a.RevokedAt.IsZero() {
		return errdefs.FailedPrecondition("artifact_revoked", "artifact %s is revoked (%s); revocation is terminal", a.ID, a.RevokeReason)
	}
	return nil
}

func illegal(a AppArtifact, to string) error {
	return errdefs.FailedPrecondition("illegal_transition", "artifact %s is %s and cannot move to %s; allowed next states: %s",
		a.ID, a.LifecycleState, to, describeNext(a.LifecycleState)).
		WithDetails(map[string]any{"state": string(a.LifecycleState), "allowed_next_states": stateNames(NextStates(a.LifecycleState))})
}

// Promote moves an artifact along draft → staged → canary → active (or
// canary → staged as a rollback). Without a target it takes the next step.
// Active requires a verified artifact.
func (s *Service) Promote(ctx context.Context, g *iam.Grants, projectID, artifactID string, in TransitionInput) (AppArtifact, error) {
	a, err := s.movable(ctx, g, projectID, artifactID, in.Reason)
	if err != nil {
		return AppArtifact{}, err
	}
	to := in.TargetState
	if to == "" {
		if n := transitions[a.LifecycleState]; len(n) > 0 && slices.Contains(promotable, n[0]) {
			to = n[0]
		} else {
			return AppArtifact{}, illegal(a, "the next promotion state")
		}
	}
	if !slices.Contains(promotable, to) {
		return AppArtifact{}, errdefs.Validation([]errdefs.FieldError{{Field: "/target_state", Code: "invalid",
			Message: "must be staged, canary or active (for the rest: gpuaas artifact deprecate or retire, POST …/deprecate or …/retire)"}})
	}
	if !CanTransition(a.LifecycleState, to) {
		return AppArtifact{}, illegal(a, string(to))
	}
	if to == StateActive && a.TrustState != TrustVerified {
		return AppArtifact{}, errdefs.FailedPrecondition("artifact_not_verified",
			"artifact %s is %s; only a verified artifact can become active — run gpuaas artifact verify %s (POST …/app-artifacts/%s/verify) first", a.ID, a.TrustState, a.ID, a.ID)
	}
	return s.transition(ctx, "artifact.promote", in.Reason, a, func(a *AppArtifact) { a.LifecycleState = to })
}

// Deprecate moves an active artifact to deprecated: no new use.
func (s *Service) Deprecate(ctx context.Context, g *iam.Grants, projectID, artifactID string, in TransitionInput) (AppArtifact, error) {
	return s.step(ctx, g, projectID, artifactID, in, StateDeprecated, "artifact.deprecate")
}

// Retire moves a deprecated artifact to retired, refused while a live
// instance uses its digest.
func (s *Service) Retire(ctx context.Context, g *iam.Grants, projectID, artifactID string, in TransitionInput) (AppArtifact, error) {
	return s.step(ctx, g, projectID, artifactID, in, StateRetired, "artifact.retire")
}

// movable resolves an artifact for a lifecycle move (promote, deprecate,
// retire): the caller may promote, gave a reason, and it is not revoked.
func (s *Service) movable(ctx context.Context, g *iam.Grants, projectID, artifactID, reason string) (AppArtifact, error) {
	_, a, err := s.artifact(ctx, g, projectID, artifactID, iam.PermArtifactPromote)
	if err != nil {
		return AppArtifact{}, err
	}
	if err := requireReason(reason); err != nil {
		return AppArtifact{}, err
	}
	if err := refuseRevoked(a); err != nil {
		return AppArtifact{}, err
	}
	return a, nil
}

func (s *Service) step(ctx context.Context, g *iam.Grants, projectID, artifactID string, in TransitionInput, to LifecycleState, action string) (AppArtifact, error) {
	a, err := s.movable(ctx, g, projectID, artifactID, in.Reason)
	if err != nil {
		return AppArtifact{}, err
	}
	if in.TargetState != "" && in.TargetState != to {
		return AppArtifact{}, errdefs.Validation([]errdefs.FieldError{{Field: "/target_state", Code: "invalid", Message: "must be " + string(to) + " here (or omitted)"}})
	}
	if !CanTransition(a.LifecycleState, to) {
		return AppArtifact{}, illegal(a, string(to))
	}
	var unused func(context.Context, Tx, AppArtifact) (map[string]any, error)
	if to == StateRetired {
		unused = s.unused
	}
	return s.transitionWith(ctx, action, in.Reason, a, func(a *AppArtifact) { a.LifecycleState = to }, unused)
}

// unused refuses to retire an artifact while a live instance runs its
// digest. It counts after the retire's update holds the artifact's row: a
// launch or deployment that shares the row to record the digest has
// committed by then (and is counted) or waits, and then finds it retired.
func (s *Service) unused(ctx context.Context, tx Tx, a AppArtifact) (map[string]any, error) {
	n, err := s.liveInstancesUsing(ctx, tx, a.AppSlug, a.Digest)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		return nil, errdefs.FailedPrecondition("artifact_in_use",
			"%d live instance(s) still run %s; decommission or upgrade them before retiring it", n, a.Digest)
	}
	return nil, nil
}

// Revoke marks an artifact revoked: terminal, from any state. It blocks
// pull intents, promotion and new launches; outstanding pull credentials
// stop being granted tokens. Revocation is of the digest: every other
// record of the project with the same digest is revoked in the same
// transaction, the digest can never be registered again there, and the
// registry refuses to serve its manifest (see registryauth.go).
func (s *Service) Revoke(ctx context.Context, g *iam.Grants, projectID, artifactID string, in TransitionInput) (AppArtifact, error) {
	_, a, err := s.artifact(ctx, g, projectID, artifactID, iam.PermArtifactRevoke)
	if err != nil {
		return AppArtifact{}, err
	}
	if err := requireReason(in.Reason); err != nil {
		return AppArtifact{}, err
	}
	if in.TargetState != "" {
		return AppArtifact{}, errdefs.Validation([]errdefs.FieldError{{Field: "/target_state", Code: "unexpected", Message: "revoke takes no target state"}})
	}
	if err := refuseRevoked(a); err != nil {
		return AppArtifact{}, err
	}
	return s.transitionWith(ctx, "artifact.revoke", in.Reason, a, func(a *AppArtifact) {
		a.RevokedAt, a.RevokeReason = s.Now(), in.Reason
	}, s.revokeDigest)
}

// revokeDigest revokes the records that share a's digest, each with its
// revoked event; the ids go into the revoke's audit row.
func (s *Service) revokeDigest(ctx context.Context, tx Tx, a AppArtifact) (map[string]any, error) {
	others, err := tx.UnrevokedArtifactsWithDigest(ctx, a.ProjectID, a.Digest)
	if err != nil {
		return nil, err
	}
	if len(others) == 0 {
		return nil, nil
	}
	if err := tx.RevokeArtifactsWithDigest(ctx, a.ProjectID, a.Digest, a.RevokeReason, a.RevokedAt); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(others))
	for _, o := range others {
		o.RevokedAt, o.RevokeReason, o.UpdatedAt = a.RevokedAt, a.RevokeReason, a.UpdatedAt
		if err := emit(tx, "artifact.revoke", a.RevokeReason, o); err != nil {
			return nil, err
		}
		ids = append(ids, o.ID)
	}
	return map[string]any{"also_revoked": ids}, nil
}

// VerifyInput is the body of verify.
type VerifyInput struct {
	Reason string `json:"reason"`
}

// Verify checks an artifact against its trust requirements and records the
// outcome: for OCI the cosign signature (and provenance when required)
// against the project's registered keys in the real registry, for blobs the
// stored object's digest. A verification failure is stored with its reason
// (trust_state failed); a registry outage changes nothing.
func (s *Service) Verify(ctx context.Context, g *iam.Grants, projectID, artifactID string, in VerifyInput) (AppArtifact, error) {
	_, a, err := s.artifact(ctx, g, projectID, artifactID, iam.PermArtifactWrite)
	if err != nil {
		return AppArtifact{}, err
	}
	if err := refuseRevoked(a); err != nil {
		return AppArtifact{}, err
	}
	if a.LifecycleState == StateRetired {
		return AppArtifact{}, errdefs.FailedPrecondition("artifact_retired", "artifact %s is retired; nothing to verify", a.ID)
	}
	var res verifyResult
	if a.ArtifactKind == KindBlob {
		res, err = s.verifyBlob(ctx, a)
	} else {
		// From reading the signature until the outcome is recorded, no
		// write of the digest's signature or attestation tags lands, in
		// this replica or another (the registry's content gate holds the
		// same lock over its check and write): a verified artifact's tags
		// are the ones it was verified against.
		var release func()
		if release, err = s.holdKeys(ctx, registry.DigestKey(a.Repository, a.Digest)); err != nil {
			return AppArtifact{}, err
		}
		defer release()
		res, err = s.verifyOCI(ctx, a)
	}
	if err != nil {
		if errdefs.KindOf(err) == errdefs.KindUnavailable {
			s.Logger.WarnContext(ctx, "artifact verification could not read the registry", "artifact_id", a.ID, "err", errors.Unwrap(err))
		}
		return AppArtifact{}, err
	}
	return s.transition(ctx, "artifact.verify", in.Reason, a, func(a *AppArtifact) {
		if res.reason == "" {
			a.TrustState, a.TrustReason, a.TrustDetail, a.VerifiedKeyID, a.VerifiedAt = TrustVerified, "", "", res.keyID, s.Now()
		} else {
			a.TrustState, a.TrustReason, a.TrustDetail, a.VerifiedKeyID = TrustFailed, res.reason, res.detail, ""
		}
	})
}

// holdKeys holds every key of keys in one hold (registry.HoldKeysWith): in
// this process, and across replicas when SignatureTags is set.
// Verification holds a digest's DigestKey (its signature and attestation
// tags), as the registry's content gate (registryAuthz) does over a tag
// write; registration and the gate's manifest delete hold it too, for the
// manifest itself.
func (s *Service) holdKeys(ctx context.Context, keys ...registry.Key) (release func(), err error) {
	return registry.HoldKeysWith(ctx, s.SignatureTags, keys...)
}

var _ registry.KeyHolder = registryAuthz{}

// HoldKeys makes the registry's content gate hold what verification and
// registration hold (registry.KeyHolder).
func (a registryAuthz) HoldKeys(ctx context.Context, keys ...registry.Key) (release func(), err error) {
	return a.s.holdKeys(ctx, keys...)
}

type verifyResult struct{ reason, detail, keyID string }

func (s *Service) verifyBlob(ctx context.Context, a AppArtifact) (verifyResult, error) {
	key, err := blobstore.ParseURI(a.SourceURI)
	if err != nil {
		return verifyResult{}, err
	}
	obj, err := s.Blobs.Stat(ctx, key)
	if errors.Is(err, blobstore.ErrNotFound) {
		return verifyResult{reason: "object_missing", detail: "nothing is stored at " + a.SourceURI}, nil
	}
	if err != nil {
		return verifyResult{}, err
	}
	if obj.Digest != a.Digest {
		return verifyResult{reason: string(signature.ReasonDigestMismatch), detail: "stored object has digest " + obj.Digest}, nil
	}
	return verifyResult{}, nil
}

func (s *Service) verifyOCI(ctx context.Context, a AppArtifact) (verifyResult, error) {
	link, err := s.registry()
	if err != nil {
		return verifyResult{}, err
	}
	q := s.Store.Read()
	rows, err := q.AllArtifactSigningKeys(ctx, a.ProjectID)
	if err != nil {
		return verifyResult{}, err
	}
	// The project's keys decide, not only the intent: an artifact published
	// before the project registered a key must be signed to verify now.
	if !a.SignatureRequired && len(rows) == 0 {
		// Nothing to check but that the digest is still in the registry.
		if _, _, err := link.reg.ManifestExists(ctx, a.Repository, a.Digest); errors.Is(err, registry.ErrNotFound) {
			return verifyResult{reason: "manifest_missing", detail: "the registry no longer holds " + a.Digest}, nil
		} else if err != nil {
			return verifyResult{}, err
		}
		return verifyResult{}, nil
	}
	var keys []signature.PublicKey
	for _, r := range rows {
		if a.SigningKeyID != "" && r.ID != a.SigningKeyID {
			continue
		}
		pub, err := signature.ParsePublicKeyPEM([]byte(r.PublicKey))
		if err != nil {
			return verifyResult{}, fmt.Errorf("signing key %s: %w", r.ID, err)
		}
		keys = append(keys, signature.PublicKey{ID: r.ID, Key: pub})
	}
	if len(keys) == 0 {
		return verifyResult{}, errdefs.FailedPrecondition("no_signing_keys", "the project has no signing key to verify with; register one first")
	}
	v, err := signature.NewVerifier(keys...)
	if err != nil {
		return verifyResult{}, err
	}
	var nopts []name.Option
	if link.insecure {
		nopts = append(nopts, name.Insecure)
	}
	repo, err := name.NewRepository(link.host+"/"+a.Repository, nopts...)
	if err != nil {
		return verifyResult{}, err
	}
	ref, err := signature.NewRepoDigest(repo, a.Digest)
	if err != nil {
		return verifyResult{}, err
	}
	tok, err := link.reg.Client().PullToken(a.Repository)
	if err != nil {
		return verifyResult{}, err
	}
	opts := signature.Options{Remote: []remote.Option{
		remote.WithTransport(link.rt),
		remote.WithAuth(authn.FromConfig(authn.AuthConfig{RegistryToken: tok})),
	}}
	res, err := v.VerifyImage(ctx, ref, opts)
	if err != nil {
		return failure(err)
	}
	if a.ProvenanceRequired {
		if _, err := v.VerifyProvenance(ctx, ref, opts); err != nil {
			return failure(err)
		}
	}
	return verifyResult{keyID: res.KeyID}, nil
}

// failure turns a verification error into a stored reason; anything that
// is not a verification failure (the registry could not be read) is an
// outage and leaves the artifact unchanged.
func failure(err error) (verifyResult, error) {
	r := signature.ReasonOf(err)
	if r == "" {
		return verifyResult{}, &errdefs.Error{Kind: errdefs.KindUnavailable, Code: "registry_unavailable",
			Message: "could not read signatures from the registry; retry later", Cause: err}
	}
	detail := err.Error()
	if len(detail) > 512 {
		detail = detail[:512]
	}
	return verifyResult{reason: string(r), detail: detail}, nil
}

// VersionArtifactsReady is the catalog's publish gate: every expected
// artifact of the app version has a registered artifact (in any project)
// that is active, verified and not revoked, and pinned to the expected
// digest (and repository) when the manifest names them. A refusal explains
// itself: details.artifacts lists, per expected artifact that is not
// ready, what the manifest pins and what is registered under that name.
func (s *Service) VersionArtifactsReady(ctx context.Context, tx storage.Tx, appSlug, version string, expected []manifest.Artifact) error {
	if len(expected) == 0 {
		return nil
	}
	// The catalog's publish transaction, seen as this domain's.
	q := s.Store.Join(tx)
	live, err := q.LiveAppArtifactsOfVersion(ctx, appSlug, version)
	if err != nil {
		return err
	}
	var names []string
	var details []map[string]any
	for _, e := range expected {
		ok := false
		registered := []map[string]any{}
		for _, a := range live {
			if a.ArtifactName != e.Name {
				continue
			}
			registered = append(registered, map[string]any{"id": a.ID, "lifecycle_state": string(a.LifecycleState),
				"trust_state": string(a.TrustState), "digest": a.Digest, "repository": a.Repository})
			if a.Launchable() && pinMatches(e, a) {
				ok = true
				break
			}
		}
		if ok {
			continue
		}
		names = append(names, e.Name)
		details = append(details, map[string]any{"name": e.Name, "expected_repository": e.Repository,
			"expected_digest": e.Digest, "registered": registered, "problem": gateProblem(e, live)})
	}
	if names != nil {
		return errdefs.FailedPrecondition("artifacts_not_ready",
			"%s %s: artifact(s) %s are not registered as active and verified (with the manifest's repository and digest): %s",
			appSlug, version, strings.Join(names, ", "), details[0]["problem"]).WithDetails(map[string]any{"artifacts": details})
	}
	return nil
}

// pinMatches reports whether a registered artifact is the one the manifest
// pins (its digest and repository, when named).
func pinMatches(e manifest.Artifact, a AppArtifact) bool {
	return (e.Digest == "" || e.Digest == a.Digest) &&
		(e.Repository == "" || e.Repository == a.Repository || strings.HasSuffix(e.Repository, "/"+a.Repository))
}

// gateProblem says, in one sentence, why no registration of e qualifies
// and what to do next.
func gateProblem(e manifest.Artifact, live []AppArtifact) string {
	var same []AppArtifact
	for _, a := range live {
		if a.ArtifactName == e.Name {
			same = append(same, a)
		}
	}
	if len(same) == 0 {
		return fmt.Sprintf("nothing is registered under the name %q for this app version; push it with --name %s (or name it %q in the manifest)", e.Name, e.Name, e.Name)
	}
	for _, a := range same {
		if pinMatches(e, a) {
			return fmt.Sprintf("%s is %s and %s: verify it and promote it to active", a.ID, a.LifecycleState, a.TrustState)
		}
	}
	return fmt.Sprintf("the registered digest(s) differ from the manifest's pin %s@%s: register that digest, or pin the registered one in the manifest", e.Repository, e.Digest)
}

// DigestLaunchable reports whether an app version has a registered OCI
// artifact with digest that new instances may run: active, verified and
// not revoked (AppArtifact.Launchable). Another domain asks this, or
// Launchable of an artifact it holds, instead of comparing states.
func (s *Service) DigestLaunchable(ctx context.Context, appSlug, appVersion, digest string) (bool, error) {
	live, err := s.Store.Read().LiveAppArtifactsOfVersion(ctx, appSlug, appVersion)
	if err != nil {
		return false, err
	}
	for _, a := range live {
		if a.ArtifactKind == KindOCI && a.Digest == digest && a.Launchable() {
			return true, nil
		}
	}
	return false, nil
}
