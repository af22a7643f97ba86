package artifacts

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// A publish credential may delete manifests in its one repository, so a
// project at its registry quota can free room without an operator: images
// whose push failed or was superseded, tags. What the platform still
// relies on is refused: a manifest registered as an artifact that is
// neither revoked nor retired (registration, verification, pull intents
// and launches all go back to it) and one a live instance runs (it may
// have to pull again: a restart on another node, a rollback).

var _ registry.ManifestDeleter = registryAuthz{}

// errNotDeleted rolls back a delete's transaction when the registry did
// not delete (no such manifest, an invalid digest): nothing to record.
var errNotDeleted = errors.New("the registry did not delete the manifest")

// DeleteManifest implements registry.ManifestDeleter. The check, the
// registry's delete and the record (the audit row, and the recount that
// gives the project's quota back) run in one transaction: a delete the
// registry did is recorded unless the commit itself fails. The content
// gate holds repository@digest around it all, which registration and
// verification of the digest hold too.
func (a registryAuthz) DeleteManifest(ctx context.Context, subject, repository, digest string, del func() bool) (string, error) {
	ev, err := a.deleter(ctx, subject, repository)
	if err != nil {
		return "", err
	}
	ev.Action, ev.ResourceType, ev.ResourceID = "artifact.registry_manifest.delete", "registry_manifest", repository+"@"+digest
	var refusal string
	err = a.s.Store.Mutate(ctx, func(tx Tx) error {
		why, err := a.s.manifestInUse(ctx, tx, repository, digest)
		if err != nil {
			return err
		}
		if refusal = why; refusal != "" {
			return errNotDeleted
		}
		if !del() {
			return errNotDeleted
		}
		if ev.ProjectID != "" {
			if err := tx.ScheduleRegistryRecount(ctx, ev.ProjectID, a.s.Now()); err != nil {
				return err
			}
			// The recount runs at once, on this replica's recount job,
			// or on any replica's next pass.
			if w := a.s.registryRecount; w != nil {
				tx.AfterCommit(w.Kick)
			}
		}
		return tx.Audit(ev, nil, map[string]any{"repository": repository, "digest": digest, "subject": subject})
	})
	switch {
	case err != nil && !errors.Is(err, errNotDeleted):
		return "", err
	case refusal != "":
		ev.Reason = refusal
		if aerr := a.s.Store.RecordOutcome(ctx, ev, "denied"); aerr != nil {
			a.s.Logger.ErrorContext(ctx, "could not audit a refused registry manifest delete", "repository", repository, "digest", digest, "err", aerr)
		}
		return refusal, nil
	}
	return "", nil
}

// deleter is the audit row of a manifest delete as far as the token's
// subject tells: a credential's delete is its intent's creator's, in the
// intent's project. Another subject (a token the platform issued itself,
// such as an operator's) acts as the platform, in the project the
// repository belongs to.
func (a registryAuthz) deleter(ctx context.Context, subject, repository string) (storage.AuditEvent, error) {
	q := a.s.Store.Read()
	if id, ok := strings.CutPrefix(subject, credentialSubjectPrefix); ok {
		c, err := q.GetRegistryCredential(ctx, id)
		if err != nil {
			return storage.AuditEvent{}, fmt.Errorf("registry credential of a manifest delete: %w", err)
		}
		it, err := q.GetArtifactIntent(ctx, c.ProjectID, c.IntentID)
		if err != nil {
			return storage.AuditEvent{}, fmt.Errorf("intent of a manifest delete's credential: %w", err)
		}
		typ, who, _ := strings.Cut(it.CreatedBy, ":")
		return storage.AuditEvent{ActorType: typ, ActorID: who, OrgID: it.OrgID, ProjectID: it.ProjectID}, nil
	}
	pid, err := q.RepositoryProject(ctx, repository)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return storage.AuditEvent{}, err
	}
	return storage.AuditEvent{ActorType: string(principal.System), ActorID: subject, ProjectID: pid}, nil
}

// manifestInUse says why the manifest digest of repository must stay ("" if
// it may go): an artifact registered there with the digest that is not
// settled (revoked or retired), or a live instance that runs the digest.
func (s *Service) manifestInUse(ctx context.Context, tx Tx, repository, digest string) (string, error) {
	arts, err := tx.RepositoryArtifactsWithDigest(ctx, repository, digest)
	if err != nil {
		return "", err
	}
	for _, art := range arts {
		if art, err = s.digestRevoked(ctx, art); err != nil {
			return "", err
		}
		if !art.Settled() {
			return fmt.Sprintf("manifest %s is artifact %s (%s %s %s, state %s, trust %s), which the platform still serves; %s, then delete it",
				digest, art.ID, art.AppSlug, art.AppVersion, art.ArtifactName, art.LifecycleState, art.TrustState, settleHint(art)), nil
		}
	}
	for _, u := range s.instanceUsers() {
		n, err := u.LiveInstancesUsingDigest(ctx, tx, digest)
		if err != nil {
			return "", err
		}
		if n > 0 {
			return fmt.Sprintf("manifest %s is run by %d live instance(s); decommission or upgrade them, then delete it", digest, n), nil
		}
	}
	return "", nil
}

// settleHint names the commands that settle a from its state.
func settleHint(a AppArtifact) string {
	cmd := func(verb string) string {
		return fmt.Sprintf("gpuaas artifact %s %s --project %s --reason …", verb, a.ID, a.ProjectID)
	}
	revoke := "revoke it (" + cmd("revoke") + ")"
	switch {
	case CanTransition(a.LifecycleState, StateRetired):
		return "retire it (" + cmd("retire") + ") or " + revoke
	case CanTransition(a.LifecycleState, StateDeprecated):
		return "deprecate and retire it (" + cmd("deprecate") + ", then " + cmd("retire") + ") or " + revoke
	}
	return revoke
}
