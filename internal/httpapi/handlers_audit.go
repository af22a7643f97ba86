package httpapi

import (
	"net/http"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// listAudit serves the audit log to admins: platform admins see everything;
// org and project admins must filter to a scope they administer.
func (a *API) listAudit(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	g := grantsFrom(ctx)
	qv := r.URL.Query()
	f := storage.AuditFilter{
		OrgID: qv.Get("org_id"), ProjectID: qv.Get("project_id"), ActorID: qv.Get("actor_id"), Action: qv.Get("action"),
		ResourceType: qv.Get("resource_type"), ResourceID: qv.Get("resource_id"), CorrelationID: qv.Get("correlation_id"), Outcome: qv.Get("outcome"),
	}
	for name, dst := range map[string]*time.Time{"since": &f.Since, "until": &f.Until} {
		if v := qv.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return errdefs.Invalid("invalid_time", "%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z", name)
			}
			*dst = t
		}
	}
	switch {
	case g.IsPlatformAdmin():
	case f.ProjectID != "":
		p, err := a.IAM.Project(ctx, g, f.ProjectID, iam.PermAuditRead)
		if err != nil {
			return err
		}
		if f.OrgID != "" && f.OrgID != p.OrgID {
			// Both filters given and they disagree: the intersection is
			// empty, not the project's whole org.
			writeJSON(w, http.StatusOK, mapList([]storage.AuditEvent{}, "", viewAudit))
			return nil
		}
		f.OrgID = p.OrgID
	case f.OrgID != "":
		if _, err := a.IAM.Org(ctx, g, f.OrgID, iam.PermAuditRead); err != nil {
			return err
		}
	default:
		return a.IAM.Deny(ctx, iam.PermAuditRead, iam.Scope{}, "audit_event", "")
	}
	pg, err := page(r)
	if err != nil {
		return err
	}
	evs, next, err := a.Store.Read().ListAudit(ctx, f, pg)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(evs, next, viewAudit))
	return nil
}
