package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Registration results of one version.
const (
	ResultCreated   = "created"
	ResultUpdated   = "updated" // a draft's body was replaced
	ResultUnchanged = "unchanged"
)

// Syntax of a submitted manifest body.
const (
	SyntaxJSON = "json"
	SyntaxYAML = "yaml"
)

// RegisteredVersion is one version of a registration and what happened to it.
type RegisteredVersion struct {
	AppVersion
	Result string
}

// Registration is the outcome of registering a manifest package.
type Registration struct {
	App       App
	AppResult string // created | updated | unchanged
	Versions  []RegisteredVersion
	Changed   bool
	Created   bool // the app or a version did not exist before
}

// ManifestProblems builds the error for an invalid manifest: 422 with every
// problem (pointer, line, message) in details.problems.
func ManifestProblems(problems []manifest.Problem) error {
	first := problems[0]
	return errdefs.Unprocessable("manifest_invalid",
		"the manifest has %d problem(s); fix each one at its pointer and line (see details.problems), for example %s",
		len(problems), first.String()).WithDetails(map[string]any{"problems": problems})
}

// registrationState is the audit view of a package's records.
type registrationState struct {
	App      *appState      `json:"app,omitempty"`
	Versions []versionState `json:"versions,omitempty"`
}

type appState struct {
	Slug           string `json:"slug"`
	DisplayName    string `json:"display_name"`
	MetadataDigest string `json:"metadata_digest"`
}

type versionState struct {
	Version string        `json:"version"`
	Status  VersionStatus `json:"status"`
	Digest  string        `json:"digest"`
}

// RegisterManifest validates a manifest package (syntax: SyntaxJSON or
// SyntaxYAML) and registers its app and versions as drafts. Re-submitting
// an identical package changes nothing; a changed body of a version that
// left draft is refused, because published versions are immutable. Only
// platform admins holding apps.manifest.write may register.
func (s *Service) RegisterManifest(ctx context.Context, g *iam.Grants, data []byte, syntax string) (Registration, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermManifestWrite, "app_manifest"); err != nil {
		return Registration{}, err
	}
	filename := "manifest.yaml"
	if syntax == SyntaxJSON {
		filename = "manifest.json"
	}
	pkg, problems, err := manifest.Parse(data, filename)
	if err != nil {
		return Registration{}, fmt.Errorf("manifest validator: %w", err)
	}
	if len(problems) > 0 {
		return Registration{}, ManifestProblems(problems)
	}
	meta, err := json.Marshal(pkg.App)
	if err != nil {
		return Registration{}, err
	}
	metaDigest := manifest.DigestOf(meta)
	type body struct {
		v      manifest.Version
		json   []byte
		digest string
	}
	bodies := make([]body, 0, len(pkg.Versions))
	for _, v := range pkg.Versions {
		b, err := v.CanonicalJSON()
		if err != nil {
			return Registration{}, err
		}
		bodies = append(bodies, body{v: v, json: b, digest: manifest.DigestOf(b)})
	}
	who := principal.From(ctx).Key()
	now := s.Now().UTC()
	var reg Registration
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		reg = Registration{}
		var before, after registrationState
		app, err := tx.GetAppBySlug(ctx, pkg.App.Slug)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			app = App{ID: iam.NewID(), Slug: pkg.App.Slug, DisplayName: pkg.App.DisplayName, Description: pkg.App.Description,
				Category: pkg.App.Category, RuntimeBackend: pkg.App.RuntimeBackend, Metadata: meta, MetadataDigest: metaDigest,
				SubmittedBy: who, CreatedAt: now, UpdatedAt: now}
			if err := tx.CreateApp(ctx, app); err != nil {
				return err
			}
			reg.AppResult, reg.Created = ResultCreated, true
		case err != nil:
			return err
		default:
			before.App = &appState{Slug: app.Slug, DisplayName: app.DisplayName, MetadataDigest: app.MetadataDigest}
			reg.AppResult = ResultUnchanged
			if app.MetadataDigest != metaDigest {
				app.DisplayName, app.Description, app.Category = pkg.App.DisplayName, pkg.App.Description, pkg.App.Category
				app.RuntimeBackend, app.Metadata, app.MetadataDigest = pkg.App.RuntimeBackend, meta, metaDigest
				app.SubmittedBy, app.UpdatedAt = who, now
				if err := tx.UpdateAppMetadata(ctx, app); err != nil {
					return err
				}
				reg.AppResult = ResultUpdated
			}
		}
		after.App = &appState{Slug: app.Slug, DisplayName: app.DisplayName, MetadataDigest: app.MetadataDigest}
		for _, b := range bodies {
			rv, err := s.registerVersion(ctx, tx, app, b.v, b.json, b.digest, who, now)
			if err != nil {
				return err
			}
			if rv.Result == ResultCreated {
				reg.Created = true
			} else {
				before.Versions = append(before.Versions, versionState{Version: rv.Version, Status: rv.Status, Digest: rv.priorDigest})
			}
			after.Versions = append(after.Versions, versionState{Version: rv.Version, Status: rv.Status, Digest: rv.Digest})
			reg.Versions = append(reg.Versions, rv.RegisteredVersion)
		}
		reg.App = app
		reg.Changed = reg.AppResult != ResultUnchanged
		for _, v := range reg.Versions {
			reg.Changed = reg.Changed || v.Result != ResultUnchanged
		}
		e := storage.AuditEvent{Action: "app_manifest.register", ResourceType: "app", ResourceID: app.ID}
		if !reg.Changed {
			// An identical re-submission changes nothing, but who submitted
			// it again is still worth a row.
			e.Action = "app_manifest.resubmit"
			return tx.Audit(e, nil, after)
		}
		var b any
		if before.App != nil {
			b = before
		}
		if err := tx.Emit(storage.Event{Type: EventManifestRegistered, Subject: "apps/" + app.Slug}, after); err != nil {
			return err
		}
		return tx.Audit(e, b, after)
	})
	return reg, err
}

type versionOutcome struct {
	RegisteredVersion
	priorDigest string
}

func (s *Service) registerVersion(ctx context.Context, tx Tx, app App, v manifest.Version, body []byte, digest, who string, now time.Time) (versionOutcome, error) {
	cur, err := tx.GetAppVersion(ctx, app.Slug, v.Version)
	if errors.Is(err, storage.ErrNotFound) {
		nv := AppVersion{ID: iam.NewID(), AppID: app.ID, AppSlug: app.Slug, Version: v.Version, Status: StatusDraft,
			RuntimeBackend: v.RuntimeBackend, Manifest: body, Digest: digest, SubmittedBy: who, CreatedAt: now, UpdatedAt: now}
		if err := tx.CreateAppVersion(ctx, nv); err != nil {
			return versionOutcome{}, err
		}
		return versionOutcome{RegisteredVersion: RegisteredVersion{AppVersion: nv, Result: ResultCreated}}, nil
	}
	if err != nil {
		return versionOutcome{}, err
	}
	out := versionOutcome{RegisteredVersion: RegisteredVersion{AppVersion: cur, Result: ResultUnchanged}, priorDigest: cur.Digest}
	if cur.Digest == digest {
		return out, nil
	}
	if cur.Status != StatusDraft {
		return versionOutcome{}, errdefs.Conflict("version_immutable",
			"version %s of app %s is already %s and its body cannot change (registered %s, submitted %s); bump the version string and register the new version",
			v.Version, app.Slug, cur.Status, cur.Digest, digest).
			WithDetails(map[string]any{"version": v.Version, "status": cur.Status, "registered_digest": cur.Digest, "submitted_digest": digest})
	}
	cur.RuntimeBackend, cur.Manifest, cur.Digest, cur.SubmittedBy, cur.UpdatedAt = v.RuntimeBackend, body, digest, who, now
	if err := tx.ReplaceDraftVersion(ctx, cur); errors.Is(err, storage.ErrNotFound) {
		return versionOutcome{}, errdefs.Conflict("version_immutable",
			"version %s of app %s left draft while this registration ran; bump the version string and register again", v.Version, app.Slug)
	} else if err != nil {
		return versionOutcome{}, err
	}
	out.AppVersion, out.Result = cur, ResultUpdated
	return out, nil
}
