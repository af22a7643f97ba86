package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// EntitlementInput is the body of PUT …/apps/entitlements/{app_slug}.
type EntitlementInput struct {
	Enabled         *bool                 `json:"enabled"`
	PolicyOverrides *EntitlementOverrides `json:"policy_overrides,omitempty"`
}

// ListEntitlements lists a project's entitlements (apps.entitlement.read).
func (s *Service) ListEntitlements(ctx context.Context, g *iam.Grants, projectID string, p storage.Page) ([]AppEntitlement, string, error) {
	if _, err := s.IAM.Project(ctx, g, projectID, iam.PermEntitlementRead); err != nil {
		return nil, "", err
	}
	return s.Store.Read().ListEntitlements(ctx, projectID, false, p)
}

// GetEntitlement returns a project's entitlement to one app.
func (s *Service) GetEntitlement(ctx context.Context, g *iam.Grants, projectID, appSlug string) (AppEntitlement, error) {
	if _, err := s.IAM.Project(ctx, g, projectID, iam.PermEntitlementRead); err != nil {
		return AppEntitlement{}, err
	}
	e, err := s.Store.Read().GetEntitlement(ctx, projectID, appSlug)
	if errors.Is(err, storage.ErrNotFound) {
		return e, errdefs.NotFound("entitlement_not_found",
			"project %s has no entitlement to app %q; a project admin can create one with gpuaas app entitle %s --project %s (PUT /api/v1/projects/%s/apps/entitlements/%s)",
			projectID, appSlug, appSlug, projectID, projectID, appSlug)
	}
	return e, err
}

// PutEntitlement creates or replaces a project's entitlement to an app
// (apps.entitlement.write: project admins). The overrides may only narrow
// what the app supports, and allowed_versions must name registered
// versions.
func (s *Service) PutEntitlement(ctx context.Context, g *iam.Grants, projectID, appSlug string, in EntitlementInput) (AppEntitlement, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermEntitlementWrite)
	if err != nil {
		return AppEntitlement{}, err
	}
	return s.putEntitlement(ctx, entitlementOwner{orgID: p.OrgID, projectID: p.ID}, appSlug, in)
}

// PutOrgEntitlement creates or replaces an org's entitlement to an app
// (apps.entitlement.write at the org: org admins). It is what a launch of
// an org's shared instance (control_plane_scope tenant) is checked against.
func (s *Service) PutOrgEntitlement(ctx context.Context, g *iam.Grants, orgID, appSlug string, in EntitlementInput) (AppEntitlement, error) {
	o, err := s.IAM.Org(ctx, g, orgID, iam.PermEntitlementWrite)
	if err != nil {
		return AppEntitlement{}, err
	}
	return s.putEntitlement(ctx, entitlementOwner{orgID: o.ID}, appSlug, in)
}

// entitlementOwner is a project, or with projectID empty an org.
type entitlementOwner struct{ orgID, projectID string }

func (o entitlementOwner) get(ctx context.Context, q Queries, appSlug string) (AppEntitlement, error) {
	if o.projectID == "" {
		return q.GetOrgEntitlement(ctx, o.orgID, appSlug)
	}
	return q.GetEntitlement(ctx, o.projectID, appSlug)
}

func (o entitlementOwner) subject(appSlug string) (subject, resourceType string) {
	if o.projectID == "" {
		return "orgs/" + o.orgID + "/apps/entitlements/" + appSlug, "app_org_entitlement"
	}
	return "projects/" + o.projectID + "/apps/entitlements/" + appSlug, "app_entitlement"
}

func (s *Service) putEntitlement(ctx context.Context, owner entitlementOwner, appSlug string, in EntitlementInput) (AppEntitlement, error) {
	if in.Enabled == nil {
		return AppEntitlement{}, errdefs.Validation([]errdefs.FieldError{{Field: "/enabled", Code: "required", Message: "is required: true or false"}})
	}
	q := s.Store.Read()
	app, err := q.GetAppBySlug(ctx, appSlug)
	if errors.Is(err, storage.ErrNotFound) {
		return AppEntitlement{}, errAppNotFound(appSlug)
	}
	if err != nil {
		return AppEntitlement{}, err
	}
	var o EntitlementOverrides
	if in.PolicyOverrides != nil {
		o = *in.PolicyOverrides
	}
	o, err = s.checkOverrides(ctx, q, app, o)
	if err != nil {
		return AppEntitlement{}, err
	}
	raw, err := json.Marshal(o)
	if err != nil {
		return AppEntitlement{}, err
	}
	who := principal.From(ctx).Key()
	now := s.Now().UTC()
	subject, resourceType := owner.subject(app.Slug)
	var out AppEntitlement
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		cur, err := owner.get(ctx, tx, app.Slug)
		var before any
		switch {
		case errors.Is(err, storage.ErrNotFound):
			cur = AppEntitlement{ID: iam.NewID(), ProjectID: owner.projectID, OrgID: owner.orgID, AppID: app.ID, AppSlug: app.Slug,
				Enabled: *in.Enabled, PolicyOverrides: raw, UpdatedBy: who, CreatedAt: now, UpdatedAt: now}
			if owner.projectID == "" {
				err = tx.CreateOrgEntitlement(ctx, cur)
			} else {
				err = tx.CreateEntitlement(ctx, cur)
			}
		case err != nil:
			return err
		default:
			before = entitlementState{Enabled: cur.Enabled, PolicyOverrides: OverridesOf(cur)}
			cur.Enabled, cur.PolicyOverrides, cur.UpdatedBy, cur.UpdatedAt = *in.Enabled, raw, who, now
			if owner.projectID == "" {
				err = tx.UpdateOrgEntitlement(ctx, cur)
			} else {
				err = tx.UpdateEntitlement(ctx, cur)
			}
		}
		if err != nil {
			return err
		}
		out = cur
		if err := tx.Emit(storage.Event{Type: EventEntitlementUpdated, Subject: subject, OrgID: owner.orgID, ProjectID: owner.projectID},
			map[string]any{"entitlement_id": cur.ID, "app_slug": app.Slug, "enabled": cur.Enabled, "policy_overrides": o}); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: resourceType + ".put", ResourceType: resourceType, ResourceID: cur.ID,
			OrgID: owner.orgID, ProjectID: owner.projectID}, before, entitlementState{AppSlug: app.Slug, Enabled: cur.Enabled, PolicyOverrides: o})
	})
	return out, err
}

// ListOrgEntitlements lists an org's entitlements (apps.entitlement.read
// at the org).
func (s *Service) ListOrgEntitlements(ctx context.Context, g *iam.Grants, orgID string, p storage.Page) ([]AppEntitlement, string, error) {
	if _, err := s.IAM.Org(ctx, g, orgID, iam.PermEntitlementRead); err != nil {
		return nil, "", err
	}
	return s.Store.Read().ListOrgEntitlements(ctx, orgID, p)
}

// GetOrgEntitlement returns an org's entitlement to one app.
func (s *Service) GetOrgEntitlement(ctx context.Context, g *iam.Grants, orgID, appSlug string) (AppEntitlement, error) {
	if _, err := s.IAM.Org(ctx, g, orgID, iam.PermEntitlementRead); err != nil {
		return AppEntitlement{}, err
	}
	e, err := s.Store.Read().GetOrgEntitlement(ctx, orgID, appSlug)
	if errors.Is(err, storage.ErrNotFound) {
		return e, errdefs.NotFound("entitlement_not_found",
			"org %s has no entitlement to app %q; an org admin can create one with gpuaas app entitle %s --org %s (PUT /api/v1/orgs/%s/apps/entitlements/%s)",
			orgID, appSlug, appSlug, orgID, orgID, appSlug)
	}
	return e, err
}

type entitlementState struct {
	AppSlug         string               `json:"app_slug,omitempty"`
	Enabled         bool                 `json:"enabled"`
	PolicyOverrides EntitlementOverrides `json:"policy_overrides"`
}

// checkOverrides validates and normalises (deduplicates) the overrides:
// they may only narrow what the app supports, and allowed_versions must be
// versions of the app.
func (s *Service) checkOverrides(ctx context.Context, q Queries, app App, o EntitlementOverrides) (EntitlementOverrides, error) {
	meta := AppMetadata(app)
	var fe []errdefs.FieldError
	check := func(field string, vals, known, supported []string, what string) []string {
		out := []string{}
		for i, v := range vals {
			f := fmt.Sprintf("/policy_overrides/%s/%d", field, i)
			switch {
			case !slices.Contains(known, v):
				fe = append(fe, errdefs.FieldError{Field: f, Code: CodeInvalid, Message: fmt.Sprintf("unknown %s %q (known: %v)", what, v, known)})
			case !slices.Contains(supported, v):
				fe = append(fe, errdefs.FieldError{Field: f, Code: CodeNotSupported, Message: fmt.Sprintf("app %s does not support %s %s (supported: %v)", app.Slug, what, v, supported)})
			case !slices.Contains(out, v):
				out = append(out, v)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	o.AllowedOperatingModes = check("allowed_operating_modes", o.AllowedOperatingModes,
		[]string{manifest.ModeTenantDedicated, manifest.ModePlatformManaged}, meta.SupportedModes.OperatingModes, "operating mode")
	o.AllowedControlPlaneScopes = check("allowed_control_plane_scopes", o.AllowedControlPlaneScopes,
		[]string{manifest.ScopeProject, manifest.ScopeTenant, manifest.ScopePlatform}, meta.SupportedModes.ControlPlaneScopes, "control plane scope")
	var versions []string
	for i, v := range o.AllowedVersions {
		if slices.Contains(versions, v) {
			continue
		}
		if _, err := q.GetAppVersion(ctx, app.Slug, v); errors.Is(err, storage.ErrNotFound) {
			fe = append(fe, errdefs.FieldError{Field: fmt.Sprintf("/policy_overrides/allowed_versions/%d", i), Code: CodeInvalid,
				Message: fmt.Sprintf("app %s has no version %q; name registered versions", app.Slug, v)})
			continue
		} else if err != nil {
			return o, err
		}
		versions = append(versions, v)
	}
	o.AllowedVersions = versions
	if len(fe) > 0 {
		return o, errdefs.Validation(fe)
	}
	return o, nil
}

// ResolveForProject decides the effective launch of an app version in a
// project: the project must hold an enabled entitlement to the app, the
// version must be published (a deprecated version serves existing
// instances only), and ResolveLaunch must accept the request under the
// entitlement's overrides. It reads through q so instance creation can call
// it inside its own transaction.
func ResolveForProject(ctx context.Context, q LaunchReader, project iam.Project, appSlug, version string, req LaunchRequest) (Effective, AppVersion, error) {
	if _, err := q.GetAppBySlug(ctx, appSlug); errors.Is(err, storage.ErrNotFound) {
		return Effective{}, AppVersion{}, errAppNotFound(appSlug)
	} else if err != nil {
		return Effective{}, AppVersion{}, err
	}
	ent, err := entitlementFor(ctx, q, project, appSlug, false)
	if err != nil {
		return Effective{}, AppVersion{}, err
	}
	v, err := q.GetAppVersion(ctx, appSlug, version)
	if errors.Is(err, storage.ErrNotFound) {
		return Effective{}, AppVersion{}, errVersionNotFound(appSlug, version)
	}
	if err != nil {
		return Effective{}, AppVersion{}, err
	}
	if v.Status != StatusPublished {
		return Effective{}, v, errdefs.FailedPrecondition("version_not_launchable",
			"version %s of app %s is %s; only published versions can be launched, pick a published version from gpuaas app catalog --project %s (GET /api/v1/projects/%s/apps/catalog)",
			version, appSlug, v.Status, project.ID, project.ID).WithDetails(map[string]any{"status": v.Status})
	}
	mv, err := decodeVersion(v)
	if err != nil {
		return Effective{}, v, err
	}
	eff, err := resolveEntitled(ctx, q, project, ent, mv, req)
	return eff, v, err
}

// ResolveEntitled resolves a launch of version mv in project under the
// entitlements it needs: the project's, and for an org's shared instance
// (control_plane_scope tenant) the org's too.
func ResolveEntitled(ctx context.Context, q LaunchReader, project iam.Project, appSlug string, mv manifest.Version, req LaunchRequest) (Effective, error) {
	ent, err := entitlementFor(ctx, q, project, appSlug, false)
	if err != nil {
		return Effective{}, err
	}
	return resolveEntitled(ctx, q, project, ent, mv, req)
}

func resolveEntitled(ctx context.Context, q LaunchReader, project iam.Project, ent AppEntitlement, mv manifest.Version, req LaunchRequest) (Effective, error) {
	eff, fes := ResolveLaunch(mv, OverridesOf(ent), req)
	if len(fes) == 0 && eff.ControlPlaneScope == manifest.ScopeTenant {
		// An org's shared instance: the org must be entitled too, and its
		// overrides narrow the launch as the project's do. The org judges
		// the mode and scope the project's entitlement chose: left to pick
		// its own, it would default an unhinted request to a scope the
		// project's overrides exclude.
		org, err := entitlementFor(ctx, q, project, ent.AppSlug, true)
		if err != nil {
			return Effective{}, err
		}
		pinned := req
		pinned.OperatingMode, pinned.ControlPlaneScope = eff.OperatingMode, eff.ControlPlaneScope
		eff, fes = ResolveLaunch(mv, OverridesOf(org), pinned)
	}
	if len(fes) > 0 {
		return Effective{}, errdefs.Validation(fes)
	}
	return eff, nil
}

// entitlementFor reads the enabled entitlement a launch in project needs:
// its org's for an org-shared instance, else the project's own.
func entitlementFor(ctx context.Context, q LaunchReader, project iam.Project, appSlug string, org bool) (AppEntitlement, error) {
	if org {
		ent, err := q.GetOrgEntitlement(ctx, project.OrgID, appSlug)
		if errors.Is(err, storage.ErrNotFound) || (err == nil && !ent.Enabled) {
			return ent, errdefs.FailedPrecondition("app_not_entitled",
				"org %s is not entitled to app %s, and an instance with control_plane_scope tenant belongs to the org; ask an org admin to enable it with gpuaas app entitle %s --org %s (PUT /api/v1/orgs/%s/apps/entitlements/%s)",
				project.OrgID, appSlug, appSlug, project.OrgID, project.OrgID, appSlug)
		}
		return ent, err
	}
	ent, err := q.GetEntitlement(ctx, project.ID, appSlug)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && !ent.Enabled) {
		return ent, errdefs.FailedPrecondition("app_not_entitled",
			"project %s is not entitled to app %s; ask a project admin to enable it with gpuaas app entitle %s --project %s (PUT /api/v1/projects/%s/apps/entitlements/%s)",
			project.ID, appSlug, appSlug, project.ID, project.ID, appSlug)
	}
	return ent, err
}

// PreviewLaunch resolves a launch without creating anything: the values an
// instance would get, or field-level errors. It needs apps.instance.create
// on the project, because it answers "could I launch this".
func (s *Service) PreviewLaunch(ctx context.Context, g *iam.Grants, projectID, appSlug, version string, req LaunchRequest) (Effective, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermInstanceCreate)
	if err != nil {
		return Effective{}, err
	}
	eff, _, err := ResolveForProject(ctx, s.Store.Read(), p, appSlug, version, req)
	return eff, err
}
