package store

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/catalog"
)

var (
	_ catalog.Tx      = (*Tx)(nil)
	_ catalog.Queries = (*Queries)(nil)
)

// Catalog is the catalog domain's storage.
func Catalog(db *DB) catalog.Store { return NewPort[catalog.Tx, catalog.Queries](db) }

const appCols = `id, slug, display_name, description, category, runtime_backend, metadata, metadata_digest, submitted_by, created_at, updated_at`

func scanApp(s interface{ Scan(...any) error }) (catalog.App, error) {
	var a catalog.App
	err := s.Scan(&a.ID, &a.Slug, &a.DisplayName, &a.Description, &a.Category, &a.RuntimeBackend, scanJSON(&a.Metadata),
		&a.MetadataDigest, &a.SubmittedBy, scanTime(&a.CreatedAt), scanTime(&a.UpdatedAt))
	return a, err
}

// CreateApp inserts an app; a taken slug is ErrAlreadyExists.
func (q *Queries) CreateApp(ctx context.Context, a catalog.App) error {
	_, err := q.exec(ctx, `INSERT INTO apps (`+appCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.ID, a.Slug, a.DisplayName, a.Description, a.Category, a.RuntimeBackend, jsonText(a.Metadata), a.MetadataDigest,
		a.SubmittedBy, ts(a.CreatedAt), ts(a.UpdatedAt))
	return err
}

// UpdateAppMetadata replaces the metadata of the app with a.ID.
func (q *Queries) UpdateAppMetadata(ctx context.Context, a catalog.App) error {
	return q.execOne(ctx, `UPDATE apps SET display_name = ?, description = ?, category = ?, runtime_backend = ?, metadata = ?,
		metadata_digest = ?, submitted_by = ?, updated_at = ? WHERE id = ?`,
		a.DisplayName, a.Description, a.Category, a.RuntimeBackend, jsonText(a.Metadata), a.MetadataDigest, a.SubmittedBy,
		ts(a.UpdatedAt), a.ID)
}

// GetAppBySlug returns the app with slug.
func (q *Queries) GetAppBySlug(ctx context.Context, slug string) (catalog.App, error) {
	a, err := scanApp(q.queryRow(ctx, `SELECT `+appCols+` FROM apps WHERE slug = ?`, slug))
	return a, scanOne(err)
}

// ListApps lists apps in creation order. With withVersionIn non-empty, only
// apps having at least one version in one of those statuses.
func (q *Queries) ListApps(ctx context.Context, withVersionIn []catalog.VersionStatus, p Page) ([]catalog.App, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	query := `SELECT ` + appCols + ` FROM apps WHERE id > ?`
	args := []any{after}
	if len(withVersionIn) > 0 {
		query += ` AND EXISTS (SELECT 1 FROM app_versions v WHERE v.app_id = apps.id AND v.status IN (` + placeholders(len(withVersionIn)) + `))`
		for _, s := range withVersionIn {
			args = append(args, string(s))
		}
	}
	rows, err := q.query(ctx, query+` ORDER BY id`+limitClause(limit), args...)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanApp)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(a catalog.App) string { return a.ID })
	return out, next, nil
}

const appVersionCols = `id, app_id, app_slug, version, status, runtime_backend, manifest, digest, submitted_by, status_reason,
	created_at, updated_at, published_at, deprecated_at, retired_at`

func scanAppVersion(s interface{ Scan(...any) error }) (catalog.AppVersion, error) {
	var v catalog.AppVersion
	err := s.Scan(&v.ID, &v.AppID, &v.AppSlug, &v.Version, &v.Status, &v.RuntimeBackend, scanJSON(&v.Manifest), &v.Digest,
		&v.SubmittedBy, &v.StatusReason, scanTime(&v.CreatedAt), scanTime(&v.UpdatedAt), scanTime(&v.PublishedAt),
		scanTime(&v.DeprecatedAt), scanTime(&v.RetiredAt))
	return v, err
}

// CreateAppVersion inserts a version; an existing (app, version) pair is
// ErrAlreadyExists.
func (q *Queries) CreateAppVersion(ctx context.Context, v catalog.AppVersion) error {
	_, err := q.exec(ctx, `INSERT INTO app_versions (`+appVersionCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		v.ID, v.AppID, v.AppSlug, v.Version, string(v.Status), v.RuntimeBackend, jsonText(v.Manifest), v.Digest, v.SubmittedBy,
		v.StatusReason, ts(v.CreatedAt), ts(v.UpdatedAt), nullTS(v.PublishedAt), nullTS(v.DeprecatedAt), nullTS(v.RetiredAt))
	return err
}

// ReplaceDraftVersion replaces the body of a version that is still a draft.
// A version that left draft meanwhile is ErrNotFound: published bodies are
// immutable.
func (q *Queries) ReplaceDraftVersion(ctx context.Context, v catalog.AppVersion) error {
	return q.execOne(ctx, `UPDATE app_versions SET runtime_backend = ?, manifest = ?, digest = ?, submitted_by = ?, updated_at = ?
		WHERE id = ? AND status = 'draft'`,
		v.RuntimeBackend, jsonText(v.Manifest), v.Digest, v.SubmittedBy, ts(v.UpdatedAt), v.ID)
}

// GetAppVersion returns one version of an app.
func (q *Queries) GetAppVersion(ctx context.Context, appSlug, version string) (catalog.AppVersion, error) {
	return q.getAppVersion(ctx, appSlug, version, "")
}

// LockAppVersion reads a version and holds it against every other
// transaction that locks or shares it until this one ends.
func (q *Queries) LockAppVersion(ctx context.Context, appSlug, version string) (catalog.AppVersion, error) {
	return q.getAppVersion(ctx, appSlug, version, q.forUpdate())
}

// ShareAppVersion reads a version and keeps its status from changing until
// the transaction ends; other transactions may share it at once.
func (q *Queries) ShareAppVersion(ctx context.Context, appSlug, version string) (catalog.AppVersion, error) {
	return q.getAppVersion(ctx, appSlug, version, q.forShare())
}

func (q *Queries) getAppVersion(ctx context.Context, appSlug, version, lock string) (catalog.AppVersion, error) {
	v, err := scanAppVersion(q.queryRow(ctx, `SELECT `+appVersionCols+` FROM app_versions WHERE app_slug = ? AND version = ?`+lock, appSlug, version))
	return v, scanOne(err)
}

// ListAppVersions lists the versions of an app in registration order,
// only those in statuses when it is non-empty.
func (q *Queries) ListAppVersions(ctx context.Context, appSlug string, statuses []catalog.VersionStatus, p Page) ([]catalog.AppVersion, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	query := `SELECT ` + appVersionCols + ` FROM app_versions WHERE app_slug = ? AND id > ?`
	args := []any{appSlug, after}
	if len(statuses) > 0 {
		query += ` AND status IN (` + placeholders(len(statuses)) + `)`
		for _, s := range statuses {
			args = append(args, string(s))
		}
	}
	rows, err := q.query(ctx, query+` ORDER BY id`+limitClause(limit), args...)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanAppVersion)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(v catalog.AppVersion) string { return v.ID })
	return out, next, nil
}

// SetAppVersionStatus moves a version from status from to status to,
// stamping the time of the new status. A version no longer in from (a
// concurrent transition won) is ErrNotFound.
func (q *Queries) SetAppVersionStatus(ctx context.Context, id string, from, to catalog.VersionStatus, reason string, at time.Time) error {
	stamp := map[catalog.VersionStatus]string{catalog.StatusPublished: "published_at", catalog.StatusDeprecated: "deprecated_at", catalog.StatusRetired: "retired_at"}[to]
	set := `status = ?, status_reason = ?, updated_at = ?`
	args := []any{string(to), reason, ts(at)}
	if stamp != "" {
		set += `, ` + stamp + ` = ?`
		args = append(args, ts(at))
	}
	args = append(args, id, string(from))
	return q.execOne(ctx, `UPDATE app_versions SET `+set+` WHERE id = ? AND status = ?`, args...)
}

const entitlementCols = `id, project_id, org_id, app_id, app_slug, enabled, policy_overrides, updated_by, created_at, updated_at`

func scanEntitlement(s interface{ Scan(...any) error }) (catalog.AppEntitlement, error) {
	var e catalog.AppEntitlement
	err := s.Scan(&e.ID, &e.ProjectID, &e.OrgID, &e.AppID, &e.AppSlug, &e.Enabled, scanJSON(&e.PolicyOverrides), &e.UpdatedBy,
		scanTime(&e.CreatedAt), scanTime(&e.UpdatedAt))
	return e, err
}

// CreateEntitlement inserts an entitlement; one per (project, app).
func (q *Queries) CreateEntitlement(ctx context.Context, e catalog.AppEntitlement) error {
	_, err := q.exec(ctx, `INSERT INTO app_entitlements (`+entitlementCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.ID, e.ProjectID, e.OrgID, e.AppID, e.AppSlug, e.Enabled, jsonText(e.PolicyOverrides), e.UpdatedBy,
		ts(e.CreatedAt), ts(e.UpdatedAt))
	return err
}

// UpdateEntitlement replaces enabled and the overrides of entitlement e.ID.
func (q *Queries) UpdateEntitlement(ctx context.Context, e catalog.AppEntitlement) error {
	return q.updateEntitlement(ctx, "app_entitlements", e)
}

func (q *Queries) updateEntitlement(ctx context.Context, table string, e catalog.AppEntitlement) error {
	return q.execOne(ctx, `UPDATE `+table+` SET enabled = ?, policy_overrides = ?, updated_by = ?, updated_at = ? WHERE id = ?`,
		e.Enabled, jsonText(e.PolicyOverrides), e.UpdatedBy, ts(e.UpdatedAt), e.ID)
}

// GetEntitlement returns the entitlement of a project to an app.
func (q *Queries) GetEntitlement(ctx context.Context, projectID, appSlug string) (catalog.AppEntitlement, error) {
	return q.getEntitlement(ctx, projectID, appSlug, "")
}

// ShareEntitlement reads a project's entitlement to an app and keeps it
// from changing until the transaction ends (an update waits).
func (q *Queries) ShareEntitlement(ctx context.Context, projectID, appSlug string) (catalog.AppEntitlement, error) {
	return q.getEntitlement(ctx, projectID, appSlug, q.forShare())
}

func (q *Queries) getEntitlement(ctx context.Context, projectID, appSlug, lock string) (catalog.AppEntitlement, error) {
	e, err := scanEntitlement(q.queryRow(ctx, `SELECT `+entitlementCols+` FROM app_entitlements WHERE project_id = ? AND app_slug = ?`+lock,
		projectID, appSlug))
	return e, scanOne(err)
}

// ListEntitlements lists a project's entitlements in creation order; with
// onlyEnabled, just the enabled ones.
func (q *Queries) ListEntitlements(ctx context.Context, projectID string, onlyEnabled bool, p Page) ([]catalog.AppEntitlement, string, error) {
	return q.listEntitlements(ctx, `SELECT `+entitlementCols+` FROM app_entitlements WHERE project_id = ?`, projectID, onlyEnabled, p)
}

func (q *Queries) listEntitlements(ctx context.Context, query, owner string, onlyEnabled bool, p Page) ([]catalog.AppEntitlement, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	query += ` AND id > ?`
	args := []any{owner, after}
	if onlyEnabled {
		query += ` AND enabled = ?`
		args = append(args, true)
	}
	rows, err := q.query(ctx, query+` ORDER BY id`+limitClause(limit), args...)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanEntitlement)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(e catalog.AppEntitlement) string { return e.ID })
	return out, next, nil
}

// An org's entitlement has a project's columns but project_id (read as "").
const (
	orgEntitlementCols   = `id, org_id, app_id, app_slug, enabled, policy_overrides, updated_by, created_at, updated_at`
	orgEntitlementSelect = `SELECT id, '', org_id, app_id, app_slug, enabled, policy_overrides, updated_by, created_at, updated_at FROM app_org_entitlements`
)

// CreateOrgEntitlement inserts an org's entitlement; one per (org, app).
func (q *Queries) CreateOrgEntitlement(ctx context.Context, e catalog.AppEntitlement) error {
	_, err := q.exec(ctx, `INSERT INTO app_org_entitlements (`+orgEntitlementCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.ID, e.OrgID, e.AppID, e.AppSlug, e.Enabled, jsonText(e.PolicyOverrides), e.UpdatedBy, ts(e.CreatedAt), ts(e.UpdatedAt))
	return err
}

// UpdateOrgEntitlement replaces enabled and the overrides of org
// entitlement e.ID.
func (q *Queries) UpdateOrgEntitlement(ctx context.Context, e catalog.AppEntitlement) error {
	return q.updateEntitlement(ctx, "app_org_entitlements", e)
}

// GetOrgEntitlement returns the entitlement of an org to an app.
func (q *Queries) GetOrgEntitlement(ctx context.Context, orgID, appSlug string) (catalog.AppEntitlement, error) {
	return q.getOrgEntitlement(ctx, orgID, appSlug, "")
}

// ShareOrgEntitlement reads an org's entitlement to an app and keeps it
// from changing until the transaction ends (an update waits).
func (q *Queries) ShareOrgEntitlement(ctx context.Context, orgID, appSlug string) (catalog.AppEntitlement, error) {
	return q.getOrgEntitlement(ctx, orgID, appSlug, q.forShare())
}

func (q *Queries) getOrgEntitlement(ctx context.Context, orgID, appSlug, lock string) (catalog.AppEntitlement, error) {
	e, err := scanEntitlement(q.queryRow(ctx, orgEntitlementSelect+` WHERE org_id = ? AND app_slug = ?`+lock, orgID, appSlug))
	return e, scanOne(err)
}

// ListOrgEntitlements lists an org's entitlements in creation order.
func (q *Queries) ListOrgEntitlements(ctx context.Context, orgID string, p Page) ([]catalog.AppEntitlement, string, error) {
	return q.listEntitlements(ctx, orgEntitlementSelect+` WHERE org_id = ?`, orgID, false, p)
}
