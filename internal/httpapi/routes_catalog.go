package httpapi

// catalogRoutes: manifests, catalog, versions, entitlements, launch preview.
func (a *API) catalogRoutes() []route {
	const (
		adminVersion = "/api/v1/admin/apps/catalog/{app_slug}/versions/{version}/"
		projectApps  = "/api/v1/projects/{project_id}/apps/"
		orgApps      = "/api/v1/orgs/{org_id}/apps/"
	)
	return []route{
		{method: "POST", path: "/api/v1/admin/apps/manifests", handler: a.registerManifest},
		{method: "POST", path: adminVersion + "publish", handler: a.versionAction("publish")},
		{method: "POST", path: adminVersion + "deprecate", handler: a.versionAction("deprecate")},
		{method: "POST", path: adminVersion + "retire", handler: a.versionAction("retire")},

		{method: "GET", path: "/api/v1/apps/catalog", handler: a.listCatalog},
		{method: "GET", path: "/api/v1/apps/catalog/{app_slug}", handler: a.getCatalogApp},
		{method: "GET", path: "/api/v1/apps/catalog/{app_slug}/versions", handler: a.listCatalogVersions},

		{method: "GET", path: projectApps + "catalog", handler: a.projectCatalog},
		{method: "POST", path: projectApps + "catalog/{app_slug}/versions/{version}/launch-preview", handler: a.launchPreview, noIdempotency: true},
		{method: "GET", path: projectApps + "entitlements", handler: a.listEntitlements},
		{method: "GET", path: projectApps + "entitlements/{app_slug}", handler: a.getEntitlement},
		{method: "PUT", path: projectApps + "entitlements/{app_slug}", handler: a.putEntitlement},
		{method: "GET", path: orgApps + "entitlements", handler: a.listEntitlements},
		{method: "GET", path: orgApps + "entitlements/{app_slug}", handler: a.getEntitlement},
		{method: "PUT", path: orgApps + "entitlements/{app_slug}", handler: a.putEntitlement},
	}
}
