package artifacts

import (
	"strings"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// Event types of the artifact lifecycle (payloads in api/asyncapi.yaml).
const (
	EventRegistered         = "apps.artifact.registered"
	EventPromoted           = "apps.artifact.promoted"
	EventDeprecated         = "apps.artifact.deprecated"
	EventRetired            = "apps.artifact.retired"
	EventRevoked            = "apps.artifact.revoked"
	EventVerified           = "apps.artifact.verified"
	EventVerificationFailed = "apps.artifact.verification_failed"
	// EventStorageQuotaUpdated: a platform admin set or cleared a project's
	// storage quotas. Consumers that mirror quotas (a console, a capacity
	// dashboard) hear of a change rather than poll for it.
	EventStorageQuotaUpdated = "apps.storage_quota.updated"
)

// eventOf names the event an audited artifact action emits.
func eventOf(action string, a AppArtifact) string {
	switch action {
	case "artifact.register":
		return EventRegistered
	case "artifact.verify":
		if a.TrustState == TrustVerified {
			return EventVerified
		}
		return EventVerificationFailed
	}
	return "apps.artifact." + strings.TrimPrefix(action, "artifact.") + "d" // promote→promoted, deprecate→deprecated, …
}

// emit writes the artifact's event in the mutation's transaction.
func emit(tx storage.Tx, action, reason string, a AppArtifact) error {
	return tx.Emit(storage.Event{Type: eventOf(action, a), Subject: "app-artifacts/" + a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID},
		map[string]any{
			"artifact_id": a.ID, "app_slug": a.AppSlug, "app_version": a.AppVersion, "artifact_name": a.ArtifactName,
			"artifact_kind": a.ArtifactKind, "digest": a.Digest, "lifecycle_state": string(a.LifecycleState),
			"trust_state": string(a.TrustState), "revoked": !a.RevokedAt.IsZero(), "reason": reason,
		})
}
