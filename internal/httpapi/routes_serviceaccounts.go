package httpapi

// serviceAccountRoutes: service accounts and the token exchange.
func (a *API) serviceAccountRoutes() []route { return nil }
