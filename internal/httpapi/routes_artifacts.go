package httpapi

// artifactRoutes: registry info, publish/pull intents, registration, lifecycle.
func (a *API) artifactRoutes() []route { return nil }
