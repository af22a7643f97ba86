package httpapi

// workerRoutes: external workers of apps whose operations no node agent
// carries out — the admin grants, and the acquire → heartbeat →
// complete/fail cycle of a granted worker.
func (a *API) workerRoutes() []route {
	const (
		grants = "/api/v1/admin/apps/{app_slug}/workers"
		worker = "/api/v1/apps/{app_slug}/worker"
		op     = worker + "/operations/{operation_id}"
	)
	return []route{
		{method: "GET", path: grants, handler: a.listAppWorkers},
		{method: "PUT", path: grants + "/{service_account_id}", handler: a.grantAppWorker},
		{method: "DELETE", path: grants + "/{service_account_id}", handler: a.revokeAppWorker},
		// The platform's operation ids are the idempotency keys of the
		// worker cycle: acquiring again returns the held operation, a
		// repeated complete or fail answers the operation as it ended.
		{method: "POST", path: worker + "/acquire", handler: a.acquireWorkerOperation, noIdempotency: true},
		{method: "POST", path: op + "/heartbeat", handler: a.heartbeatWorkerOperation, noIdempotency: true},
		{method: "POST", path: op + "/complete", handler: a.finishWorkerOperation(false), noIdempotency: true},
		{method: "POST", path: op + "/fail", handler: a.finishWorkerOperation(true), noIdempotency: true},
	}
}
