package httpapi

import (
	"net/http"

	"github.com/gpuaas/gpuaas/internal/instances"
)

type attachmentView struct {
	AppInstanceID string `json:"app_instance_id"`
	ProjectID     string `json:"project_id"`
	OrgID         string `json:"org_id"`
	AttachedBy    string `json:"attached_by"`
	CreatedAt     string `json:"created_at"`
}

func viewAttachment(a instances.Attachment) attachmentView {
	return attachmentView{AppInstanceID: a.InstanceID, ProjectID: a.ProjectID, OrgID: a.OrgID, AttachedBy: a.AttachedBy, CreatedAt: rfc3339(a.CreatedAt)}
}

func (a *API) listInstanceAttachments(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	as, err := svc.Attachments(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(as, "", viewAttachment))
	return nil
}

func (a *API) attachInstanceProject(w http.ResponseWriter, r *http.Request) error {
	var in instances.AttachInput
	if err := decode(r, &in); err != nil {
		return err
	}
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	at, err := svc.Attach(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, viewAttachment(at))
	return nil
}

func (a *API) detachInstanceProject(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.instancesService()
	if err != nil {
		return err
	}
	if err := svc.Detach(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"), r.PathValue("attached_project_id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
