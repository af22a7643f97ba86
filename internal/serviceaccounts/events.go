package serviceaccounts

import (
	"strings"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// Event types of the service-account lifecycle (payloads in
// api/asyncapi.yaml): iam.service_account.created, .enabled, .disabled,
// .key_rotated and .deleted. Payloads never carry key material.
func emit(tx Tx, action string, a ServiceAccount, status string) error {
	verb := strings.TrimPrefix(action, "service_account.")
	typ := map[string]string{"create": "created", "enable": "enabled", "disable": "disabled", "rotate_key": "key_rotated", "delete": "deleted"}[verb]
	return tx.Emit(storage.Event{Type: "iam.service_account." + typ, Subject: "projects/" + a.ProjectID + "/service-accounts/" + a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID},
		map[string]any{"service_account_id": a.ID, "slug": a.Slug, "name": a.Name, "status": status})
}
