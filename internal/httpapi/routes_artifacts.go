package httpapi

import "github.com/gpuaas/gpuaas/internal/artifacts"

// artifactRoutes: registry info, publish/pull intents, registration, lifecycle.
func (a *API) artifactRoutes() []route {
	const arts = "/api/v1/projects/{project_id}/app-artifacts"
	const uploads = "/api/v1/projects/{project_id}/artifact-uploads/{upload_id}"
	return []route{
		{method: "GET", path: "/api/v1/apps/registry", handler: a.registryInfo},
		// Not an idempotent replay: a replay would hand the secret out again.
		{method: "POST", path: "/api/v1/apps/registry/unwrap", handler: a.unwrapCredentials, noIdempotency: true},

		{method: "POST", path: arts + "/publish-intents", handler: a.createPublishIntent},
		{method: "POST", path: arts, handler: a.registerArtifact},
		{method: "GET", path: arts, handler: a.listArtifacts},
		{method: "GET", path: arts + "/{artifact_id}", handler: a.getArtifact},
		{method: "POST", path: arts + "/{artifact_id}/promote", handler: a.transitionArtifact((*artifacts.Service).Promote)},
		{method: "POST", path: arts + "/{artifact_id}/verify", handler: a.verifyArtifact},
		{method: "POST", path: arts + "/{artifact_id}/revoke", handler: a.transitionArtifact((*artifacts.Service).Revoke)},
		{method: "POST", path: arts + "/{artifact_id}/deprecate", handler: a.transitionArtifact((*artifacts.Service).Deprecate)},
		{method: "POST", path: arts + "/{artifact_id}/retire", handler: a.transitionArtifact((*artifacts.Service).Retire)},
		{method: "POST", path: arts + "/{artifact_id}/pull-intents", handler: a.createPullIntent},
		{method: "GET", path: arts + "/{artifact_id}/content", handler: a.artifactContent, stream: true},

		{method: "POST", path: "/api/v1/projects/{project_id}/artifact-signing-keys", handler: a.createSigningKey},
		{method: "GET", path: "/api/v1/projects/{project_id}/artifact-signing-keys", handler: a.listSigningKeys},

		{method: "GET", path: "/api/v1/projects/{project_id}/storage", handler: a.projectStorage},
		{method: "PUT", path: "/api/v1/projects/{project_id}/storage/quota", handler: a.putStorageQuota},

		// Blob uploads stream the body straight into the blob store.
		{method: "GET", path: uploads, handler: a.uploadStatus},
		{method: "PATCH", path: uploads, handler: a.uploadChunk, maxBody: -1, stream: true},
		{method: "PUT", path: uploads, handler: a.uploadCommit, maxBody: -1, noIdempotency: true, stream: true},
		{method: "DELETE", path: uploads, handler: a.uploadAbort},
	}
}
