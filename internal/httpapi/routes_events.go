package httpapi

// eventRoutes: the event log of a project, an org and the platform, each as
// a page list, as a Server-Sent Events stream and as a WebSocket.
func (a *API) eventRoutes() []route {
	return []route{
		{method: "GET", path: "/api/v1/projects/{project_id}/events", handler: a.listEvents(scopeProject)},
		{method: "GET", path: "/api/v1/projects/{project_id}/events/stream", handler: a.streamEvents(scopeProject)},
		{method: "GET", path: "/api/v1/projects/{project_id}/events/ws", handler: a.streamEventsWS(scopeProject), websocket: true, eventStream: true},
		{method: "GET", path: "/api/v1/orgs/{org_id}/events", handler: a.listEvents(scopeOrg)},
		{method: "GET", path: "/api/v1/orgs/{org_id}/events/stream", handler: a.streamEvents(scopeOrg)},
		{method: "GET", path: "/api/v1/orgs/{org_id}/events/ws", handler: a.streamEventsWS(scopeOrg), websocket: true, eventStream: true},
		{method: "GET", path: "/api/v1/admin/events", handler: a.listEvents(scopePlatform)},
		{method: "GET", path: "/api/v1/admin/events/stream", handler: a.streamEvents(scopePlatform)},
		{method: "GET", path: "/api/v1/admin/events/ws", handler: a.streamEventsWS(scopePlatform), websocket: true, eventStream: true},
		{method: "POST", path: "/api/v1/admin/events/republish", handler: a.republishEvents},
		{method: "GET", path: "/api/v1/admin/events/parked", handler: a.listParkedEvents},
		{method: "GET", path: "/api/asyncapi.yaml", handler: a.asyncapi, public: true},
	}
}
