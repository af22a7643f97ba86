package httpapi

// catalogRoutes: manifests, catalog, versions, entitlements, launch preview.
func (a *API) catalogRoutes() []route { return nil }
