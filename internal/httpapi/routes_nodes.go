package httpapi

// nodeRoutes: join tokens and node admin, the agent's own endpoints, and
// allocations (admin create/release, project reads).
func (a *API) nodeRoutes() []route {
	const admin = "/api/v1/admin/nodes"
	const node = "/api/v1/nodes/{node_id}"
	return []route{
		{method: "POST", path: admin + "/join-tokens", handler: a.createJoinToken},
		{method: "GET", path: admin, handler: a.listNodes},
		{method: "GET", path: admin + "/{node_id}", handler: a.getNode},
		{method: "POST", path: admin + "/{node_id}/drain", handler: a.drainNode},
		{method: "POST", path: admin + "/{node_id}/remove", handler: a.removeNode},

		// The agent's endpoints: it connects out, with a join token once and
		// a node token after. Heartbeats and results are idempotent by
		// nature (by node and by task id), so they skip the key store.
		{method: "POST", path: "/api/v1/nodes/join", handler: a.joinNode, public: true, noIdempotency: true, credential: true},
		{method: "POST", path: "/api/v1/nodes/token", handler: a.nodeToken, public: true, noIdempotency: true, credential: true, maxBody: tokenRequestMaxBody},
		{method: "POST", path: node + "/heartbeat", handler: a.nodeHeartbeat, noIdempotency: true},
		{method: "GET", path: node + "/tasks", handler: a.pollNodeTasks, writes: true},
		{method: "POST", path: node + "/tasks/{task_id}/result", handler: a.nodeTaskResult, noIdempotency: true},

		{method: "POST", path: "/api/v1/admin/allocations", handler: a.createAllocation},
		{method: "GET", path: "/api/v1/admin/allocations", handler: a.listAllAllocations},
		{method: "POST", path: "/api/v1/admin/allocations/{allocation_id}/release", handler: a.releaseAllocation},
		{method: "GET", path: "/api/v1/projects/{project_id}/allocations", handler: a.listProjectAllocations},
		{method: "GET", path: "/api/v1/projects/{project_id}/allocations/{allocation_id}", handler: a.getProjectAllocation},
	}
}
