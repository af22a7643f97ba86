package catalog

import "github.com/gpuaas/gpuaas/internal/storage"

// Event types of the catalog (payloads in api/asyncapi.yaml). Catalog
// events are platform-wide (no org or project): the admin stream sees them.
const (
	EventManifestRegistered = "apps.manifest.registered"
	EventVersionPublished   = "apps.version.published"
	EventVersionDeprecated  = "apps.version.deprecated"
	EventVersionRetired     = "apps.version.retired"
	EventEntitlementUpdated = "apps.entitlement.updated"
)

var versionEvents = map[string]string{
	ActionPublish: EventVersionPublished, ActionDeprecate: EventVersionDeprecated, ActionRetire: EventVersionRetired,
}

func emitVersion(tx Tx, action string, v AppVersion, reason string) error {
	return tx.Emit(storage.Event{Type: versionEvents[action], Subject: "apps/" + v.AppSlug + "/versions/" + v.Version},
		map[string]any{"app_slug": v.AppSlug, "version": v.Version, "version_id": v.ID, "status": v.Status, "digest": v.Digest, "reason": reason})
}
