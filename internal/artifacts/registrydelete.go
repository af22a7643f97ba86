package artifacts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

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
// have to pull again: a restart on another node, a rollback). So is a
// manifest that the image index of such an artifact references: a child
// of a multi-arch index is not registered itself, yet without it the
// index's pulls of that platform fail.

var _ registry.ManifestDeleter = registryAuthz{}

// DeleteManifest implements registry.ManifestDeleter. No transaction is
// open while the registry deletes (its storage I/O would hold SQLite's one
// write lock, and a PostgreSQL connection, for as long): the check reads,
// the project's recount is scheduled and committed before the delete (a
// recount that finds nothing to give back costs one pass), and the audit
// row is written after it on a context the client cannot cancel, so a
// delete that happened is recorded even when the client has gone. The
// content gate holds repository@digest around it all, which registration
// and verification of the digest hold too; a settled (revoked or retired)
// artifact takes no new launches, so no instance starts running the
// digest after the check.
func (a registryAuthz) DeleteManifest(ctx context.Context, subject, repository, digest, refused string, children registry.IndexChildren, del func() bool) (string, error) {
	ev, refusal, err := a.deleter(ctx, subject, repository)
	if err != nil {
		if refused == "" {
			return "", err
		}
		// The gate refused already: the refusal stands whatever the
		// record's lookup met, and is recorded as far as it is known.
		a.s.Logger.WarnContext(ctx, "the deleter of a refused registry manifest delete is unknown", "repository", repository, "digest", digest, "err", err)
	}
	ev.Action, ev.ResourceType, ev.ResourceID = "artifact.registry_manifest.delete", "registry_manifest", repository+"@"+digest
	if refusal == "" {
		refusal = refused
	}
	if refusal == "" {
		if refusal, err = a.s.manifestInUse(ctx, repository, digest, children); err != nil {
			return "", err
		}
	}
	// What is recorded is recorded even when the client has gone; each
	// write is bounded, as it runs under the gate's lock of the digest.
	record := func(what string, write func(context.Context) error) error {
		var err error
		for try := 0; try < 2; try++ {
			if try > 0 {
				a.s.Logger.WarnContext(ctx, "recording a registry manifest delete failed; trying once more", "what", what, "repository", repository, "digest", digest, "err", err)
				time.Sleep(time.Second)
			}
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
			err = write(wctx)
			cancel()
			if err == nil {
				return nil
			}
		}
		return err
	}
	if refusal != "" {
		ev.Reason = refusal
		if aerr := record("refusal", func(c context.Context) error { return a.s.Store.RecordOutcome(c, ev, "denied") }); aerr != nil {
			a.s.Logger.ErrorContext(ctx, "could not audit a refused registry manifest delete", "repository", repository, "digest", digest, "err", aerr)
		}
		return refusal, nil
	}
	recount := func(c context.Context, schedule func(q Queries) error) error {
		if ev.ProjectID == "" {
			return nil
		}
		return a.s.Store.InTx(c, schedule)
	}
	// Asked for before the delete, so a crash between the two still gives
	// the quota back ...
	if err := recount(ctx, func(q Queries) error { return q.ScheduleRegistryRecount(ctx, ev.ProjectID, a.s.Now()) }); err != nil {
		return "", err
	}
	if f := a.s.deleteChecked.Load(); f != nil {
		(*f)(ctx, repository, digest)
	}
	if !del() {
		return "", nil // nothing deleted (no such manifest): nothing to record
	}
	// ... and again after it: a recount that started before (and may have
	// read the manifest still there) must not clear the request this
	// delete needs, so the request moves to now, after that recount's
	// start, which is all a recount clears.
	if err := record("recount", func(c context.Context) error {
		return recount(c, func(q Queries) error { return q.RequestRegistryRecount(c, ev.ProjectID, a.s.Now()) })
	}); err != nil {
		a.s.Logger.ErrorContext(ctx, "could not ask for the recount after a registry manifest delete; the next delete in the project asks again", "project_id", ev.ProjectID, "repository", repository, "digest", digest, "err", err)
	}
	// The recount runs at once, on this replica's recount job, or on any
	// replica's next pass.
	if w := a.s.registryRecount; w != nil {
		w.Kick()
	}
	return "", record("delete", func(c context.Context) error {
		return a.s.Store.Mutate(c, func(tx Tx) error {
			return tx.Audit(ev, nil, map[string]any{"repository": repository, "digest": digest, "subject": subject})
		})
	})
}

// recordTimeout bounds each write that records a registry manifest delete.
const recordTimeout = 15 * time.Second

// deleter is the audit row of a manifest delete as far as the token's
// subject tells: a credential's delete is its intent's creator's, in the
// intent's project, and is refused (refusal) when that creator may no
// longer write there (disabled, removed from the project, the key or
// session revoked): a registry token outlives such a change by up to its
// lifetime, and a delete destroys data. Another subject (a token the
// platform issued itself, such as an operator's) acts as the platform, in
// the project the repository belongs to.
func (a registryAuthz) deleter(ctx context.Context, subject, repository string) (ev storage.AuditEvent, refusal string, err error) {
	q := a.s.Store.Read()
	if id, ok := strings.CutPrefix(subject, credentialSubjectPrefix); ok {
		c, err := q.GetRegistryCredential(ctx, id)
		if err != nil {
			return ev, "", fmt.Errorf("registry credential of a manifest delete: %w", err)
		}
		it, err := q.GetArtifactIntent(ctx, c.ProjectID, c.IntentID)
		if err != nil {
			return ev, "", fmt.Errorf("intent of a manifest delete's credential: %w", err)
		}
		typ, who, _ := strings.Cut(it.CreatedBy, ":")
		ev = storage.AuditEvent{ActorType: typ, ActorID: who, OrgID: it.OrgID, ProjectID: it.ProjectID}
		may, err := ownerMay(ctx, q, a.s.tokenChecker(), it, credentialPerm(c.Actions))
		if err != nil {
			return ev, "", err
		}
		if !may {
			refusal = "the credential's owner " + it.CreatedBy + " may no longer write to this project (disabled, removed, or the key or session it was created with was revoked); ask for a new publish intent"
		}
		return ev, refusal, nil
	}
	pid, err := q.RepositoryProject(ctx, repository)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return ev, "", err
	}
	return storage.AuditEvent{ActorType: string(principal.System), ActorID: subject, ProjectID: pid}, "", nil
}

// manifestInUse says why the manifest digest of repository must stay ("" if
// it may go): an artifact registered there with the digest that is not
// settled (revoked or retired), or a live instance of such an artifact's
// app that runs the digest (it may have to pull again: a restart on
// another node, a rollback). An instance pulls from the repository its
// version's artifact was registered in, so a digest registered nowhere in
// repository is run from here by no one, whatever other repositories hold
// the same content. The same holds for a manifest an image index
// registered there references (children lists an index's manifests).
// One read of the repository's artifacts serves both questions.
func (s *Service) manifestInUse(ctx context.Context, repository, digest string, children registry.IndexChildren) (string, error) {
	all, err := s.Store.Read().RepositoryArtifacts(ctx, repository)
	if err != nil {
		return "", err
	}
	var arts, others []AppArtifact
	for _, art := range all {
		if art.Digest == digest {
			arts = append(arts, art)
		} else {
			others = append(others, art)
		}
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
	for _, art := range arts {
		n, err := s.liveInstancesUsing(ctx, nil, art.AppSlug, digest)
		if err != nil {
			return "", err
		}
		if n > 0 {
			return fmt.Sprintf("manifest %s (artifact %s) is still run by live instances of app %s; decommission or upgrade them, then delete it",
				digest, art.ID, art.AppSlug), nil
		}
	}
	return s.indexChildInUse(ctx, others, digest, children)
}

// indexChildInUse says why the manifest digest must stay as a child of one
// of the image indexes among arts (the repository's other artifacts; ""
// if none holds it). Only the indexes the platform still relies on are
// read from the registry.
func (s *Service) indexChildInUse(ctx context.Context, arts []AppArtifact, digest string, children registry.IndexChildren) (string, error) {
	for _, art := range arts {
		if !registry.IndexMediaType(art.MediaType) {
			continue
		}
		art, err := s.digestRevoked(ctx, art)
		if err != nil {
			return "", err
		}
		live := 0
		if art.Settled() {
			if live, err = s.liveInstancesUsing(ctx, nil, art.AppSlug, art.Digest); err != nil {
				return "", err
			}
			if live == 0 {
				continue
			}
		}
		kids, err := children(ctx, art.Digest)
		if err != nil {
			return "", fmt.Errorf("read the image index %s of artifact %s: %w", art.Digest, art.ID, err)
		}
		if !slices.Contains(kids, digest) {
			continue
		}
		if live > 0 {
			return fmt.Sprintf("manifest %s is part of the image index %s of artifact %s (%s %s %s), which live instances of app %s still run; decommission or upgrade them, then delete it",
				digest, art.Digest, art.ID, art.AppSlug, art.AppVersion, art.ArtifactName, art.AppSlug), nil
		}
		return fmt.Sprintf("manifest %s is part of the image index %s of artifact %s (%s %s %s, state %s, trust %s), which the platform still serves; %s, then delete it",
			digest, art.Digest, art.ID, art.AppSlug, art.AppVersion, art.ArtifactName, art.LifecycleState, art.TrustState, settleHint(art)), nil
	}
	return "", nil
}

// liveInstancesUsing counts the live instances of app appSlug that run
// digest, as every registered InstanceUsage answers, in tx (nil: outside
// any transaction).
func (s *Service) liveInstancesUsing(ctx context.Context, tx storage.Tx, appSlug, digest string) (int, error) {
	total := 0
	for _, u := range s.instanceUsers() {
		n, err := u.LiveInstancesUsingDigest(ctx, tx, appSlug, digest)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
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
