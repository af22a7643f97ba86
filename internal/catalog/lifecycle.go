package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Version lifecycle actions.
const (
	ActionPublish   = "publish"
	ActionDeprecate = "deprecate"
	ActionRetire    = "retire"
)

// transitions maps an action to the one status it leaves and the one it
// reaches: draft → published → deprecated → retired.
var transitions = map[string]struct{ from, to VersionStatus }{
	ActionPublish:   {StatusDraft, StatusPublished},
	ActionDeprecate: {StatusPublished, StatusDeprecated},
	ActionRetire:    {StatusDeprecated, StatusRetired},
}

// DefaultArtifactName is the name of an artifact a manifest references
// only through artifact_ref or image_ref, and the default of
// `gpuaas artifact push --name`: the two must agree.
const DefaultArtifactName = "runtime"

// ReferencedArtifacts lists every artifact a version references: its
// declared artifacts, plus the primary artifact_ref and the launchable
// image_ref when they are not already among them. Each is what the artifact
// registry must hold active and verified before the version is published.
//
// An implicit reference is named DefaultArtifactName — the name
// `gpuaas artifact push` registers under by default — unless a declared
// artifact already has that name; then artifact_ref is "primary" and
// image_ref "image".
func ReferencedArtifacts(v manifest.Version) []manifest.Artifact {
	out := append([]manifest.Artifact(nil), v.Artifacts...)
	seen := map[string]bool{}
	for _, a := range out {
		if a.Digest != "" {
			seen[a.Repository+"@"+a.Digest] = true
		}
	}
	addRef := func(name, kind, ref string) {
		repo, digest, ok := manifest.SplitDigestRef(ref)
		if !ok || seen[repo+"@"+digest] {
			return
		}
		for i, a := range out {
			// A declared artifact of the same repository (without a pinned
			// digest, or with this one) is the same artifact. An unpinned one
			// takes the reference's digest: that digest is what runs, so it is
			// what the gate must find active and verified, not whatever
			// digest happens to be registered under the name.
			if strings.HasSuffix(repo, "/"+a.Repository) || repo == a.Repository {
				if a.Digest == "" {
					out[i].Digest = digest
					seen[repo+"@"+digest] = true
					return
				}
				if a.Digest == digest {
					return
				}
			}
		}
		seen[repo+"@"+digest] = true
		taken := false
		for _, a := range out {
			taken = taken || a.Name == DefaultArtifactName
		}
		if !taken {
			name = DefaultArtifactName
		}
		if kind == "" {
			kind = "oci"
		}
		source := "oci_registry"
		if kind == "blob" {
			source = "blob_store"
		}
		out = append(out, manifest.Artifact{Name: name, ArtifactKind: kind, SourceType: source, Repository: repo, Digest: digest})
	}
	if v.ArtifactRef != "" {
		addRef("primary", v.ArtifactKind, v.ArtifactRef)
	}
	if p := v.RuntimeProfile; p != nil && p.ImageRef != "" {
		addRef("image", "oci", p.ImageRef)
	}
	return out
}

// TransitionVersion moves a version one step along its lifecycle (action is
// publish, deprecate or retire), with a reason, audited with the status
// before and after. Only platform admins holding apps.version.publish may.
// Publishing requires every referenced artifact to be ready (ArtifactGate);
// retiring requires no live instance (InstanceGate).
func (s *Service) TransitionVersion(ctx context.Context, g *iam.Grants, appSlug, version, action, reason string) (AppVersion, error) {
	tr, ok := transitions[action]
	if !ok {
		return AppVersion{}, errdefs.Invalid("unknown_action", "unknown version action %q; use publish, deprecate or retire", action)
	}
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermVersionPublish, "app_version"); err != nil {
		return AppVersion{}, err
	}
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return AppVersion{}, errdefs.Validation([]errdefs.FieldError{{Field: "/reason", Code: "required",
			Message: "is required: say why the version is " + string(tr.to)}})
	}
	var out AppVersion
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		// Locked before the instance gate counts: a launch or version
		// change to it that shares the row has committed (and is counted)
		// or waits, and then finds the new status.
		v, err := tx.LockAppVersion(ctx, appSlug, version)
		if errors.Is(err, storage.ErrNotFound) {
			return errVersionNotFound(appSlug, version)
		}
		if err != nil {
			return err
		}
		if v.Status != tr.from {
			return errdefs.FailedPrecondition("invalid_version_transition",
				"version %s of app %s is %s; %s is allowed only from %s (lifecycle: draft → published → deprecated → retired)",
				version, appSlug, v.Status, action, tr.from).
				WithDetails(map[string]any{"status": v.Status, "required_status": tr.from})
		}
		switch action {
		case ActionPublish:
			if err := s.checkArtifacts(ctx, tx, v); err != nil {
				return err
			}
		case ActionRetire:
			if err := s.checkNoInstances(ctx, tx, v); err != nil {
				return err
			}
		}
		before := versionTransitionState{AppSlug: v.AppSlug, Version: v.Version, Status: v.Status, Digest: v.Digest}
		now := s.Now().UTC()
		if err := tx.SetAppVersionStatus(ctx, v.ID, tr.from, tr.to, reason, now); errors.Is(err, storage.ErrNotFound) {
			return errdefs.Conflict("version_changed", "version %s of app %s changed while this request ran; reload it and retry", version, appSlug)
		} else if err != nil {
			return err
		}
		if out, err = tx.GetAppVersion(ctx, appSlug, version); err != nil {
			return err
		}
		after := before
		after.Status = out.Status
		if err := emitVersion(tx, action, out, reason); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app_version." + action, ResourceType: "app_version", ResourceID: v.ID, Reason: reason}, before, after)
	})
	return out, err
}

type versionTransitionState struct {
	AppSlug string        `json:"app_slug"`
	Version string        `json:"version"`
	Status  VersionStatus `json:"status"`
	Digest  string        `json:"digest"`
}

func errVersionNotFound(appSlug, version string) error {
	return errdefs.NotFound("app_version_not_found", "app %s has no version %q; list its versions with gpuaas app versions %s (GET /api/v1/apps/catalog/%s/versions)", appSlug, version, appSlug, appSlug)
}

func errAppNotFound(appSlug string) error {
	return errdefs.NotFound("app_not_found", "no app %q is in the catalog; list apps with gpuaas app list (GET /api/v1/apps/catalog)", appSlug)
}

// decodeVersion reads a stored version body.
func decodeVersion(v AppVersion) (manifest.Version, error) {
	var mv manifest.Version
	if err := json.Unmarshal(v.Manifest, &mv); err != nil {
		return mv, fmt.Errorf("stored manifest of %s %s: %w", v.AppSlug, v.Version, err)
	}
	return mv, nil
}

// checkArtifacts enforces "publish only when every referenced artifact is
// active and verified". With no artifact registry wired in, a version that
// references artifacts cannot be vouched for and is refused.
func (s *Service) checkArtifacts(ctx context.Context, tx Tx, v AppVersion) error {
	mv, err := decodeVersion(v)
	if err != nil {
		return err
	}
	refs := ReferencedArtifacts(mv)
	if len(refs) == 0 {
		return nil
	}
	gate := s.artifactGate()
	if gate == nil {
		names := make([]string, 0, len(refs))
		for _, a := range refs {
			names = append(names, a.Name)
		}
		return errdefs.FailedPrecondition("artifact_registry_not_configured",
			"version %s of app %s references %d artifact(s) (%s) but the artifact registry is not configured on this server, so none can be confirmed active and verified; configure the artifact registry, register and promote the artifacts, then publish again",
			v.Version, v.AppSlug, len(refs), strings.Join(names, ", "))
	}
	if err := gate.VersionArtifactsReady(ctx, tx, v.AppSlug, v.Version, refs); err != nil {
		if _, ok := errdefs.As(err); ok {
			return err
		}
		return fmt.Errorf("artifact gate: %w", err)
	}
	return nil
}

// checkNoInstances enforces "retire only when no live instance uses the
// version". Without an instances domain there are no instances.
func (s *Service) checkNoInstances(ctx context.Context, tx Tx, v AppVersion) error {
	n := 0
	for _, gate := range s.instanceGateList() {
		live, err := gate.LiveInstances(ctx, tx, v.AppSlug, v.Version)
		if err != nil {
			return fmt.Errorf("instance gate: %w", err)
		}
		n += live
	}
	if n > 0 {
		return errdefs.FailedPrecondition("version_in_use",
			"%d live instance(s) still run version %s of app %s; upgrade or decommission them before retiring it", n, v.Version, v.AppSlug).
			WithDetails(map[string]any{"live_instances": n})
	}
	return nil
}
