package httpapi

// serviceAccountRoutes: service accounts and the token exchange.
func (a *API) serviceAccountRoutes() []route {
	const sa = "/api/v1/projects/{project_id}/service-accounts"
	return []route{
		{method: "POST", path: sa, handler: a.createServiceAccount},
		{method: "GET", path: sa, handler: a.listServiceAccounts},
		{method: "GET", path: sa + "/{service_account_id}", handler: a.getServiceAccount},
		{method: "POST", path: sa + "/{service_account_id}/disable", handler: a.disableServiceAccount},
		{method: "POST", path: sa + "/{service_account_id}/enable", handler: a.enableServiceAccount},
		{method: "POST", path: sa + "/{service_account_id}/rotate-key", handler: a.rotateServiceAccountKey},
		{method: "DELETE", path: sa + "/{service_account_id}", handler: a.deleteServiceAccount},

		{method: "POST", path: "/api/v1/auth/service-account/token", handler: a.serviceAccountToken,
			public: true, noIdempotency: true, credential: true, maxBody: tokenRequestMaxBody},
	}
}
