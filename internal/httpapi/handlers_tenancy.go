package httpapi

import (
	"net/http"

	"github.com/gpuaas/gpuaas/internal/iam"
)

func (a *API) createOrg(w http.ResponseWriter, r *http.Request) error {
	var in iam.CreateOrgInput
	if err := decode(r, &in); err != nil {
		return err
	}
	o, err := a.IAM.CreateOrg(r.Context(), grantsFrom(r.Context()), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, viewOrg(o))
	return nil
}

func (a *API) listOrgs(w http.ResponseWriter, r *http.Request) error {
	p, err := page(r)
	if err != nil {
		return err
	}
	os, next, err := a.IAM.ListOrgs(r.Context(), grantsFrom(r.Context()), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(os, next, viewOrg))
	return nil
}

func (a *API) getOrg(w http.ResponseWriter, r *http.Request) error {
	o, err := a.IAM.Org(r.Context(), grantsFrom(r.Context()), r.PathValue("org_id"), "")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewOrg(o))
	return nil
}

func (a *API) createProject(w http.ResponseWriter, r *http.Request) error {
	var in iam.CreateProjectInput
	if err := decode(r, &in); err != nil {
		return err
	}
	p, err := a.IAM.CreateProject(r.Context(), grantsFrom(r.Context()), r.PathValue("org_id"), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, viewProject(p))
	return nil
}

func (a *API) listProjects(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	ps, next, err := a.IAM.ListProjects(r.Context(), grantsFrom(r.Context()), r.PathValue("org_id"), pg)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(ps, next, viewProject))
	return nil
}

func (a *API) getProject(w http.ResponseWriter, r *http.Request) error {
	p, err := a.IAM.Project(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), iam.PermProjectsRead)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewProject(p))
	return nil
}

func (a *API) addMember(w http.ResponseWriter, r *http.Request, scopeType, scopeID string) error {
	var in iam.AddMemberInput
	if err := decode(r, &in); err != nil {
		return err
	}
	if err := required(map[string]string{"user_id": in.UserID, "role": in.Role}); err != nil {
		return err
	}
	b, err := a.IAM.AddMember(r.Context(), grantsFrom(r.Context()), scopeType, scopeID, in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, viewBinding(b))
	return nil
}

func (a *API) listMembers(w http.ResponseWriter, r *http.Request, scopeType, scopeID string) error {
	p, err := page(r)
	if err != nil {
		return err
	}
	bs, next, err := a.IAM.ListMembers(r.Context(), grantsFrom(r.Context()), scopeType, scopeID, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(bs, next, viewBinding))
	return nil
}

func (a *API) removeMember(w http.ResponseWriter, r *http.Request, scopeType, scopeID string) error {
	if err := a.IAM.RemoveMember(r.Context(), grantsFrom(r.Context()), scopeType, scopeID, r.PathValue("binding_id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) addOrgMember(w http.ResponseWriter, r *http.Request) error {
	return a.addMember(w, r, iam.ScopeOrg, r.PathValue("org_id"))
}
func (a *API) listOrgMembers(w http.ResponseWriter, r *http.Request) error {
	return a.listMembers(w, r, iam.ScopeOrg, r.PathValue("org_id"))
}
func (a *API) removeOrgMember(w http.ResponseWriter, r *http.Request) error {
	return a.removeMember(w, r, iam.ScopeOrg, r.PathValue("org_id"))
}
func (a *API) addProjectMember(w http.ResponseWriter, r *http.Request) error {
	return a.addMember(w, r, iam.ScopeProject, r.PathValue("project_id"))
}
func (a *API) listProjectMembers(w http.ResponseWriter, r *http.Request) error {
	return a.listMembers(w, r, iam.ScopeProject, r.PathValue("project_id"))
}
func (a *API) removeProjectMember(w http.ResponseWriter, r *http.Request) error {
	return a.removeMember(w, r, iam.ScopeProject, r.PathValue("project_id"))
}

func (a *API) createUser(w http.ResponseWriter, r *http.Request) error {
	var in iam.CreateUserInput
	if err := decode(r, &in); err != nil {
		return err
	}
	if err := required(map[string]string{"email": in.Email, "password": in.Password}); err != nil {
		return err
	}
	u, err := a.IAM.CreateUser(r.Context(), grantsFrom(r.Context()), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, iam.PublicUser(u))
	return nil
}

func (a *API) setUserStatus(w http.ResponseWriter, r *http.Request, status iam.UserStatus) error {
	u, err := a.IAM.SetUserStatus(r.Context(), grantsFrom(r.Context()), r.PathValue("user_id"), status)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, iam.PublicUser(u))
	return nil
}

func (a *API) disableUser(w http.ResponseWriter, r *http.Request) error {
	return a.setUserStatus(w, r, "disabled")
}
func (a *API) enableUser(w http.ResponseWriter, r *http.Request) error {
	return a.setUserStatus(w, r, "active")
}
