package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// CatalogApp is one app of the platform catalog.
type CatalogApp struct {
	ID             string `json:"id"`
	Slug           string `json:"slug"`
	DisplayName    string `json:"display_name"`
	Description    string `json:"description"`
	Category       string `json:"category"`
	RuntimeBackend string `json:"runtime_backend"`
	SupportedModes struct {
		OperatingModes     []string `json:"operating_modes"`
		ControlPlaneScopes []string `json:"control_plane_scopes"`
	} `json:"supported_modes"`
	UI *struct {
		ExtensionKind string `json:"extension_kind"`
		Path          string `json:"path,omitempty"`
	} `json:"ui,omitempty"`
	MetadataDigest string `json:"metadata_digest"`
	SubmittedBy    string `json:"submitted_by"`
	CreatedAt      string `json:"created_at"`
	UpdatedAt      string `json:"updated_at"`
}

// AppVersion is one registered version of an app. Manifest is the
// normalised version body.
type AppVersion struct {
	ID             string          `json:"id"`
	AppSlug        string          `json:"app_slug"`
	Version        string          `json:"version"`
	Status         string          `json:"status"`
	RuntimeBackend string          `json:"runtime_backend"`
	Digest         string          `json:"digest"`
	Manifest       json.RawMessage `json:"manifest"`
	SubmittedBy    string          `json:"submitted_by"`
	StatusReason   string          `json:"status_reason"`
	CreatedAt      string          `json:"created_at"`
	UpdatedAt      string          `json:"updated_at"`
	PublishedAt    string          `json:"published_at,omitempty"`
	DeprecatedAt   string          `json:"deprecated_at,omitempty"`
	RetiredAt      string          `json:"retired_at,omitempty"`
}

// ManifestRegistration is the answer to a manifest registration.
type ManifestRegistration struct {
	App       CatalogApp `json:"app"`
	AppResult string     `json:"app_result"`
	Changed   bool       `json:"changed"`
	Versions  []struct {
		ID             string `json:"id"`
		Version        string `json:"version"`
		Status         string `json:"status"`
		RuntimeBackend string `json:"runtime_backend"`
		Digest         string `json:"digest"`
		Result         string `json:"result"`
	} `json:"versions"`
}

// PolicyOverrides narrow what an app's manifest allows for one project.
type PolicyOverrides struct {
	AllowedOperatingModes     []string `json:"allowed_operating_modes,omitempty"`
	AllowedControlPlaneScopes []string `json:"allowed_control_plane_scopes,omitempty"`
	AllowedVersions           []string `json:"allowed_versions,omitempty"`
	CanaryOptIn               bool     `json:"canary_opt_in,omitempty"`
}

// Entitlement is a project's entitlement to an app, or an org's (then
// ProjectID is empty).
type Entitlement struct {
	ID              string          `json:"id"`
	OrgID           string          `json:"org_id"`
	ProjectID       string          `json:"project_id"`
	AppSlug         string          `json:"app_slug"`
	Enabled         bool            `json:"enabled"`
	PolicyOverrides PolicyOverrides `json:"policy_overrides"`
	UpdatedBy       string          `json:"updated_by"`
	CreatedAt       string          `json:"created_at"`
	UpdatedAt       string          `json:"updated_at"`
}

// VersionActionRequest gives the reason of a version's lifecycle change,
// for the audit log.
type VersionActionRequest struct {
	Reason string `json:"reason"`
}

type entitlementRequest struct {
	Enabled         bool            `json:"enabled"`
	PolicyOverrides PolicyOverrides `json:"policy_overrides"`
}

// ManifestProblem is one thing wrong with a submitted manifest.
type ManifestProblem struct {
	Pointer string `json:"pointer"` // RFC 6901 JSON pointer into the document
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// ManifestProblems returns the problems of a manifest_invalid error (nil
// for any other error).
func ManifestProblems(err error) []ManifestProblem {
	var api *APIError
	if !errors.As(err, &api) || api.Code != "manifest_invalid" {
		return nil
	}
	b, err := json.Marshal(api.Details["problems"])
	if err != nil {
		return nil
	}
	var out []ManifestProblem
	_ = json.Unmarshal(b, &out)
	return out
}

// ProjectCatalogEntry is an app a project may launch, with its launchable versions.
type ProjectCatalogEntry struct {
	App         CatalogApp   `json:"app"`
	Entitlement Entitlement  `json:"entitlement"`
	Versions    []AppVersion `json:"versions"`
}

// LaunchRequest is what a launch asks for; the server decides the effective values.
type LaunchRequest struct {
	OperatingMode     string          `json:"operating_mode,omitempty"`
	ControlPlaneScope string          `json:"control_plane_scope,omitempty"`
	Resources         *LaunchResource `json:"resources,omitempty"`
	Config            json.RawMessage `json:"config,omitempty"`
	PlacementIntent   json.RawMessage `json:"placement_intent,omitempty"`
	Parameters        json.RawMessage `json:"parameters,omitempty"`
}

// LaunchResource holds resource inputs; nil means the profile default.
type LaunchResource struct {
	GPUCount  *int `json:"gpu_count,omitempty"`
	CPUCores  *int `json:"cpu_cores,omitempty"`
	MemoryGiB *int `json:"memory_gib,omitempty"`
	HostPort  *int `json:"host_port,omitempty"`
}

// LaunchEffective is the server-decided launch.
type LaunchEffective struct {
	Version            string `json:"version"`
	RuntimeBackend     string `json:"runtime_backend"`
	OperatingMode      string `json:"operating_mode"`
	ControlPlaneScope  string `json:"control_plane_scope"`
	TenantBoundaryMode string `json:"tenant_boundary_mode"`
	Resources          struct {
		GPUCount  int `json:"gpu_count"`
		CPUCores  int `json:"cpu_cores,omitempty"`
		MemoryGiB int `json:"memory_gib,omitempty"`
		HostPort  int `json:"host_port,omitempty"`
	} `json:"resources"`
	Config          json.RawMessage `json:"config,omitempty"`
	PlacementIntent json.RawMessage `json:"placement_intent,omitempty"`
	Parameters      json.RawMessage `json:"parameters,omitempty"`
	// TargetAllocations and LaunchRefusal: which allocations fit, and what
	// create would answer now (nil: it would accept the launch).
	TargetAllocations []TargetAllocation `json:"target_allocations,omitempty"`
	LaunchRefusal     *LaunchRefusal     `json:"launch_refusal,omitempty"`
}

// TargetAllocation is one of the project's live allocations and whether
// the previewed launch can run on it.
type TargetAllocation struct {
	AllocationID string `json:"allocation_id"`
	NodeID       string `json:"node_id"`
	Shape        string `json:"shape"`
	State        string `json:"state"`
	GPUCount     int    `json:"gpu_count"`
	Compatible   bool   `json:"compatible"`
	Problems     []struct {
		Field   string `json:"field"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"problems"`
}

// LaunchRefusal is the error an instance create would answer, with its
// HTTP status.
type LaunchRefusal struct {
	Status int `json:"status"`
	APIError
}

// CatalogListOptions pages a list.
type CatalogListOptions struct {
	Limit  int
	Cursor string
}

func (o CatalogListOptions) query() url.Values {
	return listQuery(map[string]string{"cursor": o.Cursor}, o.Limit)
}

// CatalogPage is one page of a catalog list.
type CatalogPage[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

// RegisterManifest submits a manifest package exactly as written (so
// problem lines match the file). filename picks the media type: .json is
// sent as JSON, anything else as YAML.
//
// Operation: submitAppManifest
func (c *Client) RegisterManifest(ctx context.Context, filename string, data []byte) (ManifestRegistration, error) {
	ct := "application/yaml"
	if strings.EqualFold(path.Ext(filename), ".json") {
		ct = "application/json"
	}
	var out ManifestRegistration
	err := c.Do(ctx, http.MethodPost, "/api/v1/admin/apps/manifests", nil, nil, &out, catalogRawBody(ct, data))
	return out, err
}

// catalogRawBody sends data unchanged with content type ct.
func catalogRawBody(ct string, data []byte) RequestOption {
	return func(r *http.Request) {
		r.Body = io.NopCloser(bytes.NewReader(data))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
		r.ContentLength = int64(len(data))
		r.Header.Set("Content-Type", ct)
	}
}

// ListCatalog lists the raw platform catalog (not entitlement-filtered).
//
// Operation: listCatalogApps
func (c *Client) ListCatalog(ctx context.Context, o CatalogListOptions) (CatalogPage[CatalogApp], error) {
	var out CatalogPage[CatalogApp]
	return out, c.Do(ctx, http.MethodGet, "/api/v1/apps/catalog", o.query(), nil, &out)
}

// GetCatalogApp reads one app of the raw catalog.
//
// Operation: getCatalogApp
func (c *Client) GetCatalogApp(ctx context.Context, appSlug string) (CatalogApp, error) {
	var out CatalogApp
	return out, c.Do(ctx, http.MethodGet, "/api/v1/apps/catalog/"+url.PathEscape(appSlug), nil, nil, &out)
}

// ListAppVersions lists an app's versions, only those in status when set.
//
// Operation: listCatalogAppVersions
func (c *Client) ListAppVersions(ctx context.Context, appSlug, status string, o CatalogListOptions) (CatalogPage[AppVersion], error) {
	q := o.query()
	if status != "" {
		q.Set("status", status)
	}
	var out CatalogPage[AppVersion]
	return out, c.Do(ctx, http.MethodGet, "/api/v1/apps/catalog/"+url.PathEscape(appSlug)+"/versions", q, nil, &out)
}

// TransitionAppVersion publishes, deprecates or retires a version (action
// is "publish", "deprecate" or "retire"), with a reason for the audit log.
//
// Operation: publishAppVersion deprecateAppVersion retireAppVersion
func (c *Client) TransitionAppVersion(ctx context.Context, appSlug, version, action, reason string) (AppVersion, error) {
	var out AppVersion
	p := "/api/v1/admin/apps/catalog/" + url.PathEscape(appSlug) + "/versions/" + url.PathEscape(version) + "/" + url.PathEscape(action)
	return out, c.Do(ctx, http.MethodPost, p, nil, VersionActionRequest{Reason: reason}, &out)
}

// ProjectCatalog lists the apps a project is entitled to and their launchable versions.
//
// Operation: listProjectCatalogApps
func (c *Client) ProjectCatalog(ctx context.Context, projectID string, o CatalogListOptions) (CatalogPage[ProjectCatalogEntry], error) {
	var out CatalogPage[ProjectCatalogEntry]
	return out, c.Do(ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(projectID)+"/apps/catalog", o.query(), nil, &out)
}

// ListEntitlements lists a project's app entitlements.
//
// Operation: listAppEntitlements
func (c *Client) ListEntitlements(ctx context.Context, projectID string, o CatalogListOptions) (CatalogPage[Entitlement], error) {
	var out CatalogPage[Entitlement]
	return out, c.Do(ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(projectID)+"/apps/entitlements", o.query(), nil, &out)
}

// GetEntitlement reads a project's entitlement to one app.
//
// Operation: getAppEntitlement
func (c *Client) GetEntitlement(ctx context.Context, projectID, appSlug string) (Entitlement, error) {
	var out Entitlement
	return out, c.Do(ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(projectID)+"/apps/entitlements/"+url.PathEscape(appSlug), nil, nil, &out)
}

// PutEntitlement enables, disables or narrows a project's entitlement to an app.
//
// Operation: putAppEntitlement
func (c *Client) PutEntitlement(ctx context.Context, projectID, appSlug string, enabled bool, o PolicyOverrides) (Entitlement, error) {
	var out Entitlement
	in := entitlementRequest{Enabled: enabled, PolicyOverrides: o}
	return out, c.Do(ctx, http.MethodPut, "/api/v1/projects/"+url.PathEscape(projectID)+"/apps/entitlements/"+url.PathEscape(appSlug), nil, in, &out)
}

// ListOrgEntitlements lists an org's entitlements.
//
// Operation: listOrgAppEntitlements
func (c *Client) ListOrgEntitlements(ctx context.Context, orgID string, o CatalogListOptions) (CatalogPage[Entitlement], error) {
	var out CatalogPage[Entitlement]
	return out, c.Do(ctx, http.MethodGet, "/api/v1/orgs/"+url.PathEscape(orgID)+"/apps/entitlements", o.query(), nil, &out)
}

// GetOrgEntitlement reads an org's entitlement to one app.
//
// Operation: getOrgAppEntitlement
func (c *Client) GetOrgEntitlement(ctx context.Context, orgID, appSlug string) (Entitlement, error) {
	var out Entitlement
	return out, c.Do(ctx, http.MethodGet, "/api/v1/orgs/"+url.PathEscape(orgID)+"/apps/entitlements/"+url.PathEscape(appSlug), nil, nil, &out)
}

// PutOrgEntitlement enables, disables or narrows an org's entitlement to an
// app: what launches of the org's shared instances (control_plane_scope
// tenant) are checked against.
//
// Operation: putOrgAppEntitlement
func (c *Client) PutOrgEntitlement(ctx context.Context, orgID, appSlug string, enabled bool, o PolicyOverrides) (Entitlement, error) {
	var out Entitlement
	in := entitlementRequest{Enabled: enabled, PolicyOverrides: o}
	return out, c.Do(ctx, http.MethodPut, "/api/v1/orgs/"+url.PathEscape(orgID)+"/apps/entitlements/"+url.PathEscape(appSlug), nil, in, &out)
}

// PreviewLaunch resolves a launch without creating anything.
//
// Operation: previewAppLaunch
func (c *Client) PreviewLaunch(ctx context.Context, projectID, appSlug, version string, req LaunchRequest) (LaunchEffective, error) {
	var out LaunchEffective
	p := "/api/v1/projects/" + url.PathEscape(projectID) + "/apps/catalog/" + url.PathEscape(appSlug) + "/versions/" + url.PathEscape(version) + "/launch-preview"
	return out, c.Do(ctx, http.MethodPost, p, nil, req, &out)
}
