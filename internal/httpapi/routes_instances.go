package httpapi

// instanceRoutes: app instances, their lifecycle requests, timeline,
// members, logs, and the operations those requests started.
func (a *API) instanceRoutes() []route {
	const (
		instances = "/api/v1/projects/{project_id}/app-instances"
		instance  = instances + "/{app_instance_id}"
	)
	return []route{
		{method: "GET", path: instances, handler: a.listInstances},
		{method: "POST", path: instances, handler: a.createInstance},
		{method: "GET", path: instance, handler: a.getInstance},
		{method: "POST", path: instance + "/upgrade", handler: a.instanceVersionAction(false)},
		{method: "POST", path: instance + "/rollback", handler: a.instanceVersionAction(true)},
		{method: "POST", path: instance + "/decommission", handler: a.decommissionInstance},
		{method: "GET", path: instance + "/events", handler: a.listInstanceEvents},
		{method: "GET", path: instance + "/members", handler: a.listInstanceMembers},
		{method: "POST", path: instance + "/members", handler: a.addInstanceMembers},
		{method: "POST", path: instance + "/members/{member_id}/remove", handler: a.instanceMemberAction(false)},
		{method: "POST", path: instance + "/members/{member_id}/recover", handler: a.instanceMemberAction(true)},
		{method: "GET", path: instance + "/logs", handler: a.instanceLogs},
		{method: "GET", path: instance + "/attachments", handler: a.listInstanceAttachments},
		{method: "POST", path: instance + "/attachments", handler: a.attachInstanceProject},
		{method: "DELETE", path: instance + "/attachments/{attached_project_id}", handler: a.detachInstanceProject},
		// The CloudEvents (source, id) of each event is its idempotency key.
		{method: "POST", path: instance + "/runtime-events", handler: a.postRuntimeEvents, maxBody: runtimeEventsMaxBody, noIdempotency: true},
		{method: "POST", path: instance + "/ui-open", handler: a.openInstanceUI},
		{method: "GET", path: "/api/v1/projects/{project_id}/operations/{operation_id}", handler: a.getOperation},
	}
}
