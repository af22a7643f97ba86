package httpapi

// releaseRoutes: the platform's own releases (issue 21). Reads are
// anonymous (a fresh machine downloads the CLI before it has an account);
// uploads and publishing are for platform admins.
func (a *API) releaseRoutes() []route {
	const pub = "/api/v1/platform/releases"
	const admin = "/api/v1/admin/platform/releases/{version}"
	return []route{
		{method: "GET", path: pub, handler: a.listPlatformReleases, public: true},
		{method: "GET", path: pub + "/signing-key", handler: a.getReleaseSigningKey, public: true},
		{method: "GET", path: pub + "/{version}", handler: a.getPlatformRelease, public: true},
		{method: "GET", path: pub + "/{version}/manifest", handler: a.getReleaseManifest, public: true},
		{method: "GET", path: pub + "/{version}/manifest.sig", handler: a.getReleaseSignature, public: true},
		{method: "GET", path: pub + "/{version}/artifacts/{name}", handler: a.downloadReleaseArtifact, public: true, stream: true},
		{method: "PUT", path: admin + "/artifacts/{name}", handler: a.uploadReleaseArtifact, maxBody: -1, noIdempotency: true, stream: true},
		{method: "POST", path: admin + "/publish", handler: a.publishPlatformRelease},
	}
}
