package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// Org is a tenant: it owns projects.
type Org struct {
	ID        string `json:"id"`
	Slug      string `json:"slug"`
	Name      string `json:"name"`
	CreatedAt string `json:"created_at"`
}

// Project is where service accounts, artifacts, allocations and app
// instances live.
type Project struct {
	ID          string `json:"id"`
	OrgID       string `json:"org_id"`
	Slug        string `json:"slug"`
	Name        string `json:"name"`
	Description string `json:"description"`
	CreatedAt   string `json:"created_at"`
}

type createOrgRequest struct {
	Slug string `json:"slug"`
	Name string `json:"name"`
}

type createProjectRequest struct {
	Slug        string `json:"slug"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// ListOrgs lists the orgs the caller can see.
//
// Operation: listOrgs
func (c *Client) ListOrgs(ctx context.Context, o CatalogListOptions) (CatalogPage[Org], error) {
	var p CatalogPage[Org]
	return p, c.Do(ctx, http.MethodGet, "/api/v1/orgs", o.query(), nil, &p)
}

// GetOrg reads one org.
//
// Operation: getOrg
func (c *Client) GetOrg(ctx context.Context, orgID string) (Org, error) {
	var o Org
	return o, c.Do(ctx, http.MethodGet, "/api/v1/orgs/"+url.PathEscape(orgID), nil, nil, &o)
}

// CreateOrg creates an org (platform admins).
//
// Operation: createOrg
func (c *Client) CreateOrg(ctx context.Context, slug, name string, opts ...RequestOption) (Org, error) {
	var o Org
	in := createOrgRequest{Slug: slug, Name: name}
	return o, c.Do(ctx, http.MethodPost, "/api/v1/orgs", nil, in, &o, opts...)
}

// ListProjects lists the projects of an org the caller can see.
//
// Operation: listProjects
func (c *Client) ListProjects(ctx context.Context, orgID string, o CatalogListOptions) (CatalogPage[Project], error) {
	var p CatalogPage[Project]
	return p, c.Do(ctx, http.MethodGet, "/api/v1/orgs/"+url.PathEscape(orgID)+"/projects", o.query(), nil, &p)
}

// GetProject reads one project.
//
// Operation: getProject
func (c *Client) GetProject(ctx context.Context, projectID string) (Project, error) {
	var p Project
	return p, c.Do(ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(projectID), nil, nil, &p)
}

// CreateProject creates a project in an org (projects.create on the org).
//
// Operation: createProject
func (c *Client) CreateProject(ctx context.Context, orgID, slug, name, description string, opts ...RequestOption) (Project, error) {
	var p Project
	in := createProjectRequest{Slug: slug, Name: name, Description: description}
	return p, c.Do(ctx, http.MethodPost, "/api/v1/orgs/"+url.PathEscape(orgID)+"/projects", nil, in, &p, opts...)
}

// User is a person who signs in.
type User struct {
	ID          string `json:"id"`
	Email       string `json:"email"`
	DisplayName string `json:"display_name"`
	Status      string `json:"status"` // active | disabled
	CreatedAt   string `json:"created_at"`
}

// CreateUserRequest creates a user (platform admins).
type CreateUserRequest struct {
	Email       string `json:"email"`
	Password    string `json:"password"` // at least 12 characters
	DisplayName string `json:"display_name,omitempty"`
}

// CreateUser creates a user (platform admins).
//
// Operation: createUser
func (c *Client) CreateUser(ctx context.Context, in CreateUserRequest, opts ...RequestOption) (User, error) {
	var u User
	return u, c.Do(ctx, http.MethodPost, "/api/v1/users", nil, in, &u, opts...)
}

// DisableUser disables a user; their tokens stop working at once.
//
// Operation: disableUser
func (c *Client) DisableUser(ctx context.Context, userID string) (User, error) {
	var u User
	return u, c.Do(ctx, http.MethodPost, "/api/v1/users/"+url.PathEscape(userID)+"/disable", nil, nil, &u)
}

// EnableUser enables a disabled user.
//
// Operation: enableUser
func (c *Client) EnableUser(ctx context.Context, userID string) (User, error) {
	var u User
	return u, c.Do(ctx, http.MethodPost, "/api/v1/users/"+url.PathEscape(userID)+"/enable", nil, nil, &u)
}

// RoleBinding grants a principal a role on a scope.
type RoleBinding struct {
	ID            string `json:"id"`
	PrincipalType string `json:"principal_type"` // user | service_account
	PrincipalID   string `json:"principal_id"`
	Role          string `json:"role"`
	ScopeType     string `json:"scope_type"` // platform | org | project
	ScopeID       string `json:"scope_id"`
	CreatedAt     string `json:"created_at"`
}

// addMemberRequest grants a user a role (org_admin on an org;
// project_admin, project_member, project_viewer or app_operator on a
// project).
type addMemberRequest struct {
	UserID string `json:"user_id"`
	Role   string `json:"role"`
}

func orgMembersPath(orgID string) string { return "/api/v1/orgs/" + url.PathEscape(orgID) + "/members" }

func projectMembersPath(projectID string) string {
	return "/api/v1/projects/" + url.PathEscape(projectID) + "/members"
}

// ListOrgMembers lists an org's role bindings.
//
// Operation: listOrgMembers
func (c *Client) ListOrgMembers(ctx context.Context, orgID string, o CatalogListOptions) (CatalogPage[RoleBinding], error) {
	return c.listMembers(ctx, orgMembersPath(orgID), o)
}

// AddOrgMember grants a user a role on an org.
//
// Operation: addOrgMember
func (c *Client) AddOrgMember(ctx context.Context, orgID, userID, role string, opts ...RequestOption) (RoleBinding, error) {
	return c.addMember(ctx, orgMembersPath(orgID), userID, role, opts)
}

// RemoveOrgMember removes one of an org's role bindings.
//
// Operation: removeOrgMember
func (c *Client) RemoveOrgMember(ctx context.Context, orgID, bindingID string) error {
	return c.Do(ctx, http.MethodDelete, orgMembersPath(orgID)+"/"+url.PathEscape(bindingID), nil, nil, nil)
}

// ListProjectMembers lists a project's role bindings.
//
// Operation: listProjectMembers
func (c *Client) ListProjectMembers(ctx context.Context, projectID string, o CatalogListOptions) (CatalogPage[RoleBinding], error) {
	return c.listMembers(ctx, projectMembersPath(projectID), o)
}

// AddProjectMember grants a user a role on a project.
//
// Operation: addProjectMember
func (c *Client) AddProjectMember(ctx context.Context, projectID, userID, role string, opts ...RequestOption) (RoleBinding, error) {
	return c.addMember(ctx, projectMembersPath(projectID), userID, role, opts)
}

// RemoveProjectMember removes one of a project's role bindings.
//
// Operation: removeProjectMember
func (c *Client) RemoveProjectMember(ctx context.Context, projectID, bindingID string) error {
	return c.Do(ctx, http.MethodDelete, projectMembersPath(projectID)+"/"+url.PathEscape(bindingID), nil, nil, nil)
}

func (c *Client) listMembers(ctx context.Context, path string, o CatalogListOptions) (CatalogPage[RoleBinding], error) {
	var p CatalogPage[RoleBinding]
	return p, c.Do(ctx, http.MethodGet, path, o.query(), nil, &p)
}

func (c *Client) addMember(ctx context.Context, path, userID, role string, opts []RequestOption) (RoleBinding, error) {
	var b RoleBinding
	return b, c.Do(ctx, http.MethodPost, path, nil, addMemberRequest{UserID: userID, Role: role}, &b, opts...)
}

// AuditEvent is one row of the audit log.
type AuditEvent struct {
	ID            string          `json:"id"`
	OccurredAt    string          `json:"occurred_at"`
	ActorType     string          `json:"actor_type"`
	ActorID       string          `json:"actor_id"`
	OrgID         string          `json:"org_id"`
	ProjectID     string          `json:"project_id"`
	Action        string          `json:"action"`
	ResourceType  string          `json:"resource_type"`
	ResourceID    string          `json:"resource_id"`
	Before        json.RawMessage `json:"before"`
	After         json.RawMessage `json:"after"`
	Reason        string          `json:"reason"`
	CorrelationID string          `json:"correlation_id"`
	Outcome       string          `json:"outcome"` // success | denied | failure
}

// AuditFilter narrows ListAuditEvents; empty fields match everything.
type AuditFilter struct {
	OrgID, ProjectID, ActorID, Action, ResourceType, ResourceID, CorrelationID string
	Outcome                                                                    string // success | denied | failure
	Since, Until                                                               time.Time
	Limit                                                                      int
	Cursor                                                                     string
}

func (f AuditFilter) query() url.Values {
	q := listQuery(map[string]string{"org_id": f.OrgID, "project_id": f.ProjectID, "actor_id": f.ActorID, "action": f.Action,
		"resource_type": f.ResourceType, "resource_id": f.ResourceID, "correlation_id": f.CorrelationID, "outcome": f.Outcome, "cursor": f.Cursor}, f.Limit)
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	return q
}

// ListAuditEvents reads the audit log, newest first (admins; org and
// project admins see their scope).
//
// Operation: listAuditEvents
func (c *Client) ListAuditEvents(ctx context.Context, f AuditFilter) (CatalogPage[AuditEvent], error) {
	var p CatalogPage[AuditEvent]
	return p, c.Do(ctx, http.MethodGet, "/api/v1/audit-events", f.query(), nil, &p)
}
