package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/manifest"
)

// registerManifest takes the manifest package itself as the body: JSON
// (application/json) or YAML (application/yaml, text/yaml). Problem lines
// refer to the body as sent, so a CLI that uploads the file unchanged
// reports the author's own line numbers.
func (a *API) registerManifest(w http.ResponseWriter, r *http.Request) error {
	syntax := catalog.SyntaxJSON
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		switch {
		case err != nil:
			return errdefs.Invalid("unsupported_media_type", "send the manifest as application/json or application/yaml")
		case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		case mt == "application/yaml" || mt == "application/x-yaml" || mt == "text/yaml" || mt == "text/x-yaml" || strings.HasSuffix(mt, "+yaml"):
			syntax = catalog.SyntaxYAML
		default:
			return errdefs.Invalid("unsupported_media_type", "send the manifest as application/json or application/yaml, not %s", mt)
		}
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return decodeError(err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return errdefs.Invalid("empty_body", "the request body is empty; send the manifest package (JSON or YAML)")
	}
	reg, err := a.Catalog.RegisterManifest(r.Context(), grantsFrom(r.Context()), data, syntax)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if reg.Created {
		status = http.StatusCreated
	}
	out := registrationView{App: viewApp(reg.App), AppResult: reg.AppResult, Changed: reg.Changed, Versions: []registeredVersionView{}}
	for _, v := range reg.Versions {
		out.Versions = append(out.Versions, registeredVersionView{ID: v.ID, Version: v.Version, Status: string(v.Status),
			RuntimeBackend: v.RuntimeBackend, Digest: v.Digest, Result: v.Result})
	}
	writeJSON(w, status, out)
	return nil
}

type versionActionInput struct {
	Reason string `json:"reason"`
}

func (a *API) versionAction(action string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var in versionActionInput
		if err := decode(r, &in); err != nil {
			return err
		}
		v, err := a.Catalog.TransitionVersion(r.Context(), grantsFrom(r.Context()), r.PathValue("app_slug"), r.PathValue("version"), action, in.Reason)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, viewAppVersion(v))
		return nil
	}
}

func (a *API) listCatalog(w http.ResponseWriter, r *http.Request) error {
	p, err := page(r)
	if err != nil {
		return err
	}
	apps, next, err := a.Catalog.ListCatalog(r.Context(), grantsFrom(r.Context()), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(apps, next, viewApp))
	return nil
}

func (a *API) getCatalogApp(w http.ResponseWriter, r *http.Request) error {
	app, err := a.Catalog.GetCatalogApp(r.Context(), grantsFrom(r.Context()), r.PathValue("app_slug"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewApp(app))
	return nil
}

func (a *API) listCatalogVersions(w http.ResponseWriter, r *http.Request) error {
	p, err := page(r)
	if err != nil {
		return err
	}
	vs, next, err := a.Catalog.ListCatalogVersions(r.Context(), grantsFrom(r.Context()), r.PathValue("app_slug"), r.URL.Query().Get("status"), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(vs, next, viewAppVersion))
	return nil
}

func (a *API) projectCatalog(w http.ResponseWriter, r *http.Request) error {
	p, err := page(r)
	if err != nil {
		return err
	}
	entries, next, err := a.Catalog.ProjectCatalog(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(entries, next, func(e catalog.ProjectCatalogEntry) projectCatalogEntryView {
		out := projectCatalogEntryView{App: viewApp(e.App), Entitlement: viewEntitlement(e.Entitlement), Versions: []appVersionView{}}
		for _, v := range e.Versions {
			out.Versions = append(out.Versions, viewAppVersion(v))
		}
		return out
	}))
	return nil
}

func (a *API) launchPreview(w http.ResponseWriter, r *http.Request) error {
	var in catalog.LaunchRequest
	if err := decode(r, &in); err != nil {
		return err
	}
	eff, err := a.Catalog.PreviewLaunch(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_slug"), r.PathValue("version"), in)
	if err != nil {
		return err
	}
	out := launchPreviewView{Effective: eff, TargetAllocations: []instances.Target{}}
	if a.Instances != nil {
		if out.TargetAllocations, err = a.Instances.Targets(r.Context(), r.PathValue("project_id"), r.PathValue("app_slug"), r.PathValue("version"), eff); err != nil {
			return err
		}
		refusal := a.Instances.LaunchRefusal(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_slug"), r.PathValue("version"), in)
		if e, ok := errdefs.As(refusal); ok && statusOf[e.Kind] >= 400 && statusOf[e.Kind] < 500 {
			details := e.Details
			if details == nil {
				details = map[string]any{}
			}
			out.LaunchRefusal = &launchRefusalView{Status: statusOf[e.Kind],
				envelopeBody: envelopeBody{Code: e.Code, Message: e.Message, CorrelationID: correlation.ID(r.Context()), Details: details}}
		} else if refusal != nil {
			return refusal
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// The entitlement handlers serve a project's entitlements and, on the
// /orgs/{org_id} paths, an org's.

func (a *API) listEntitlements(w http.ResponseWriter, r *http.Request) error {
	p, err := page(r)
	if err != nil {
		return err
	}
	g := grantsFrom(r.Context())
	var es []catalog.AppEntitlement
	var next string
	if org := r.PathValue("org_id"); org != "" {
		es, next, err = a.Catalog.ListOrgEntitlements(r.Context(), g, org, p)
	} else {
		es, next, err = a.Catalog.ListEntitlements(r.Context(), g, r.PathValue("project_id"), p)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(es, next, viewEntitlement))
	return nil
}

func (a *API) getEntitlement(w http.ResponseWriter, r *http.Request) error {
	g := grantsFrom(r.Context())
	var e catalog.AppEntitlement
	var err error
	if org := r.PathValue("org_id"); org != "" {
		e, err = a.Catalog.GetOrgEntitlement(r.Context(), g, org, r.PathValue("app_slug"))
	} else {
		e, err = a.Catalog.GetEntitlement(r.Context(), g, r.PathValue("project_id"), r.PathValue("app_slug"))
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewEntitlement(e))
	return nil
}

func (a *API) putEntitlement(w http.ResponseWriter, r *http.Request) error {
	var in catalog.EntitlementInput
	if err := decode(r, &in); err != nil {
		return err
	}
	g := grantsFrom(r.Context())
	var e catalog.AppEntitlement
	var err error
	if org := r.PathValue("org_id"); org != "" {
		e, err = a.Catalog.PutOrgEntitlement(r.Context(), g, org, r.PathValue("app_slug"), in)
	} else {
		e, err = a.Catalog.PutEntitlement(r.Context(), g, r.PathValue("project_id"), r.PathValue("app_slug"), in)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewEntitlement(e))
	return nil
}

// Views of the catalog domain.

type supportedModesView struct {
	OperatingModes     []string `json:"operating_modes"`
	ControlPlaneScopes []string `json:"control_plane_scopes"`
}

type appView struct {
	ID             string             `json:"id"`
	Slug           string             `json:"slug"`
	DisplayName    string             `json:"display_name"`
	Description    string             `json:"description"`
	Category       string             `json:"category"`
	RuntimeBackend string             `json:"runtime_backend"`
	SupportedModes supportedModesView `json:"supported_modes"`
	UI             *manifest.UI       `json:"ui,omitempty"`
	MetadataDigest string             `json:"metadata_digest"`
	SubmittedBy    string             `json:"submitted_by"`
	CreatedAt      string             `json:"created_at"`
	UpdatedAt      string             `json:"updated_at"`
}

func catalogStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func viewApp(a catalog.App) appView {
	m := catalog.AppMetadata(a)
	return appView{ID: a.ID, Slug: a.Slug, DisplayName: a.DisplayName, Description: a.Description, Category: a.Category,
		RuntimeBackend: a.RuntimeBackend,
		SupportedModes: supportedModesView{OperatingModes: catalogStrings(m.SupportedModes.OperatingModes), ControlPlaneScopes: catalogStrings(m.SupportedModes.ControlPlaneScopes)},
		UI:             m.UI, MetadataDigest: a.MetadataDigest, SubmittedBy: a.SubmittedBy, CreatedAt: rfc3339(a.CreatedAt), UpdatedAt: rfc3339(a.UpdatedAt)}
}

type appVersionView struct {
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

func viewAppVersion(v catalog.AppVersion) appVersionView {
	return appVersionView{ID: v.ID, AppSlug: v.AppSlug, Version: v.Version, Status: string(v.Status), RuntimeBackend: v.RuntimeBackend,
		Digest: v.Digest, Manifest: rawOrNull(v.Manifest), SubmittedBy: v.SubmittedBy, StatusReason: v.StatusReason,
		CreatedAt: rfc3339(v.CreatedAt), UpdatedAt: rfc3339(v.UpdatedAt), PublishedAt: rfc3339(v.PublishedAt),
		DeprecatedAt: rfc3339(v.DeprecatedAt), RetiredAt: rfc3339(v.RetiredAt)}
}

type registeredVersionView struct {
	ID             string `json:"id"`
	Version        string `json:"version"`
	Status         string `json:"status"`
	RuntimeBackend string `json:"runtime_backend"`
	Digest         string `json:"digest"`
	Result         string `json:"result"`
}

type registrationView struct {
	App       appView                 `json:"app"`
	AppResult string                  `json:"app_result"`
	Versions  []registeredVersionView `json:"versions"`
	Changed   bool                    `json:"changed"`
}

type policyOverridesView struct {
	AllowedOperatingModes     []string `json:"allowed_operating_modes"`
	AllowedControlPlaneScopes []string `json:"allowed_control_plane_scopes"`
	AllowedVersions           []string `json:"allowed_versions"`
	CanaryOptIn               bool     `json:"canary_opt_in"`
}

type entitlementView struct {
	ID              string              `json:"id"`
	OrgID           string              `json:"org_id"`
	ProjectID       string              `json:"project_id"`
	AppSlug         string              `json:"app_slug"`
	Enabled         bool                `json:"enabled"`
	PolicyOverrides policyOverridesView `json:"policy_overrides"`
	UpdatedBy       string              `json:"updated_by"`
	CreatedAt       string              `json:"created_at"`
	UpdatedAt       string              `json:"updated_at"`
}

func viewEntitlement(e catalog.AppEntitlement) entitlementView {
	o := catalog.OverridesOf(e)
	return entitlementView{ID: e.ID, OrgID: e.OrgID, ProjectID: e.ProjectID, AppSlug: e.AppSlug, Enabled: e.Enabled,
		PolicyOverrides: policyOverridesView{AllowedOperatingModes: catalogStrings(o.AllowedOperatingModes),
			AllowedControlPlaneScopes: catalogStrings(o.AllowedControlPlaneScopes), AllowedVersions: catalogStrings(o.AllowedVersions), CanaryOptIn: o.CanaryOptIn},
		UpdatedBy: e.UpdatedBy, CreatedAt: rfc3339(e.CreatedAt), UpdatedAt: rfc3339(e.UpdatedAt)}
}

type projectCatalogEntryView struct {
	App         appView          `json:"app"`
	Entitlement entitlementView  `json:"entitlement"`
	Versions    []appVersionView `json:"versions"`
}

// launchPreviewView is the effective launch plus which of the project's
// allocations the version can target with it.
type launchPreviewView struct {
	catalog.Effective
	TargetAllocations []instances.Target `json:"target_allocations"`
	// LaunchRefusal is what creating the instance with these values would
	// answer now (absent when it would be accepted): preview runs create's
	// checks, placement and launch gate included, read-only.
	LaunchRefusal *launchRefusalView `json:"launch_refusal,omitempty"`
}

// launchRefusalView is the error create would answer, with its HTTP status.
type launchRefusalView struct {
	Status int `json:"status"`
	envelopeBody
}
