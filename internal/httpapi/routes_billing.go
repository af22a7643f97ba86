package httpapi

// billingRoutes: usage ingest and reads, the ledger, prices, budgets.
func (a *API) billingRoutes() []route {
	return []route{
		{method: "POST", path: "/api/v1/projects/{project_id}/app-instances/{app_instance_id}/usage", handler: a.postUsage,
			maxBody: usageMaxBody},
		{method: "GET", path: "/api/v1/billing/usage", handler: a.listUsage},
		{method: "GET", path: "/api/v1/billing/ledger", handler: a.listLedger},
		{method: "GET", path: "/api/v1/billing/costs", handler: a.billingCosts},
		{method: "GET", path: "/api/v1/projects/{project_id}/billing/budget", handler: a.getBudget},
		{method: "PUT", path: "/api/v1/projects/{project_id}/billing/budget", handler: a.putBudget},
		{method: "POST", path: "/api/v1/admin/billing/prices", handler: a.createPrice},
		{method: "GET", path: "/api/v1/admin/billing/prices", handler: a.listPrices},
		{method: "POST", path: "/api/v1/admin/billing/ledger/{entry_id}/corrections", handler: a.correctLedgerEntry},
		{method: "GET", path: "/api/v1/admin/billing/unrated-usage", handler: a.listUnratedUsage},
	}
}
