package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// listedStatuses are the version statuses everyone who may read the raw
// catalog sees. Drafts (under review) and retired versions are visible to
// catalog admins only.
var listedStatuses = []VersionStatus{StatusPublished, StatusDeprecated}

// AllStatuses lists every version status in lifecycle order.
var AllStatuses = []VersionStatus{StatusDraft, StatusPublished, StatusDeprecated, StatusRetired}

// canReadCatalog: the raw catalog is a platform surface, readable by any
// principal holding apps.catalog.read somewhere (platform, an org, or a
// project; a service account in its own project).
func canReadCatalog(g *iam.Grants) bool {
	if g == nil {
		return false
	}
	if g.Can(iam.PermCatalogRead, iam.Scope{}) {
		return true
	}
	if g.P.Type == principal.ServiceAccount {
		return g.Can(iam.PermCatalogRead, iam.Scope{OrgID: g.P.OrgID, ProjectID: g.P.ProjectID})
	}
	for _, org := range g.OrgIDs() {
		if g.Can(iam.PermCatalogRead, iam.Scope{OrgID: org}) {
			return true
		}
		for _, p := range g.ProjectIDsIn(org) {
			if g.Can(iam.PermCatalogRead, iam.Scope{OrgID: org, ProjectID: p}) {
				return true
			}
		}
	}
	return false
}

// isCatalogAdmin: platform admins who review and publish versions also see
// drafts and retired versions.
func isCatalogAdmin(g *iam.Grants) bool {
	return g.Can(iam.PermVersionPublish, iam.Scope{}) || g.Can(iam.PermManifestWrite, iam.Scope{})
}

func (s *Service) requireCatalogRead(ctx context.Context, g *iam.Grants) error {
	if canReadCatalog(g) {
		return nil
	}
	return s.IAM.Deny(ctx, iam.PermCatalogRead, iam.Scope{}, "app", "")
}

// ListCatalog lists the raw platform catalog. It is not filtered by any
// project's entitlements: it is what exists, not what a project may launch.
func (s *Service) ListCatalog(ctx context.Context, g *iam.Grants, p storage.Page) ([]App, string, error) {
	if err := s.requireCatalogRead(ctx, g); err != nil {
		return nil, "", err
	}
	var statuses []VersionStatus
	if !isCatalogAdmin(g) {
		statuses = listedStatuses
	}
	return s.Store.Read().ListApps(ctx, statuses, p)
}

// GetCatalogApp returns one app of the raw catalog.
func (s *Service) GetCatalogApp(ctx context.Context, g *iam.Grants, appSlug string) (App, error) {
	if err := s.requireCatalogRead(ctx, g); err != nil {
		return App{}, err
	}
	return s.visibleApp(ctx, g, appSlug)
}

func (s *Service) visibleApp(ctx context.Context, g *iam.Grants, appSlug string) (App, error) {
	q := s.Store.Read()
	app, err := q.GetAppBySlug(ctx, appSlug)
	if errors.Is(err, storage.ErrNotFound) {
		return App{}, errAppNotFound(appSlug)
	}
	if err != nil || isCatalogAdmin(g) {
		return app, err
	}
	vs, _, err := q.ListAppVersions(ctx, appSlug, listedStatuses, storage.Page{Limit: 1})
	if err != nil {
		return App{}, err
	}
	if len(vs) == 0 {
		return App{}, errAppNotFound(appSlug)
	}
	return app, nil
}

// ListCatalogVersions lists the versions of an app, optionally only those
// in status. Non-admins see published and deprecated versions.
func (s *Service) ListCatalogVersions(ctx context.Context, g *iam.Grants, appSlug, status string, p storage.Page) ([]AppVersion, string, error) {
	if err := s.requireCatalogRead(ctx, g); err != nil {
		return nil, "", err
	}
	if status != "" && !slices.Contains(AllStatuses, VersionStatus(status)) {
		return nil, "", errdefs.Invalid("invalid_status", "status must be one of %v", AllStatuses)
	}
	if _, err := s.visibleApp(ctx, g, appSlug); err != nil {
		return nil, "", err
	}
	statuses := AllStatuses
	if !isCatalogAdmin(g) {
		statuses = listedStatuses
	}
	if status != "" {
		if !slices.Contains(statuses, VersionStatus(status)) {
			return nil, "", nil
		}
		statuses = []VersionStatus{VersionStatus(status)}
	}
	return s.Store.Read().ListAppVersions(ctx, appSlug, statuses, p)
}

// AppMetadata decodes the stored app section of a manifest package.
func AppMetadata(a App) manifest.App {
	var m manifest.App
	_ = json.Unmarshal(a.Metadata, &m)
	return m
}

// ProjectCatalogEntry is one app a project may launch: the app, the
// project's entitlement and the versions it may launch.
type ProjectCatalogEntry struct {
	App         App
	Entitlement AppEntitlement
	Versions    []AppVersion
}

// ProjectCatalog lists the apps a project is entitled to (enabled
// entitlement) that have at least one launchable version: published, and
// allowed by the entitlement's allowed_versions when it narrows them.
func (s *Service) ProjectCatalog(ctx context.Context, g *iam.Grants, projectID string, p storage.Page) ([]ProjectCatalogEntry, string, error) {
	if _, err := s.IAM.Project(ctx, g, projectID, iam.PermCatalogRead); err != nil {
		return nil, "", err
	}
	q := s.Store.Read()
	ents, next, err := q.ListEntitlements(ctx, projectID, true, p)
	if err != nil {
		return nil, "", err
	}
	out := []ProjectCatalogEntry{}
	for _, e := range ents {
		app, err := q.GetAppBySlug(ctx, e.AppSlug)
		if err != nil {
			return nil, "", err
		}
		o := OverridesOf(e)
		vs, _, err := q.ListAppVersions(ctx, e.AppSlug, []VersionStatus{StatusPublished}, storage.Page{Limit: storage.MaxPageLimit})
		if err != nil {
			return nil, "", err
		}
		vs = slices.DeleteFunc(vs, func(v AppVersion) bool {
			return len(o.AllowedVersions) > 0 && !slices.Contains(o.AllowedVersions, v.Version)
		})
		if len(vs) == 0 {
			continue
		}
		out = append(out, ProjectCatalogEntry{App: app, Entitlement: e, Versions: vs})
	}
	return out, next, nil
}

// OverridesOf decodes an entitlement's policy overrides.
func OverridesOf(e AppEntitlement) EntitlementOverrides {
	var o EntitlementOverrides
	_ = json.Unmarshal(e.PolicyOverrides, &o)
	return o
}
