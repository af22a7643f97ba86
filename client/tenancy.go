package client

import (
	"context"
	"net/http"
	"net/url"
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

// ListOrgs lists the orgs the caller can see.
func (c *Client) ListOrgs(ctx context.Context, o CatalogListOptions) (CatalogPage[Org], error) {
	var p CatalogPage[Org]
	return p, c.Do(ctx, http.MethodGet, "/api/v1/orgs", o.query(), nil, &p)
}

// GetOrg reads one org.
func (c *Client) GetOrg(ctx context.Context, orgID string) (Org, error) {
	var o Org
	return o, c.Do(ctx, http.MethodGet, "/api/v1/orgs/"+url.PathEscape(orgID), nil, nil, &o)
}

// CreateOrg creates an org (platform admins).
func (c *Client) CreateOrg(ctx context.Context, slug, name string, opts ...RequestOption) (Org, error) {
	var o Org
	in := map[string]string{"slug": slug, "name": name}
	return o, c.Do(ctx, http.MethodPost, "/api/v1/orgs", nil, in, &o, opts...)
}

// ListProjects lists the projects of an org the caller can see.
func (c *Client) ListProjects(ctx context.Context, orgID string, o CatalogListOptions) (CatalogPage[Project], error) {
	var p CatalogPage[Project]
	return p, c.Do(ctx, http.MethodGet, "/api/v1/orgs/"+url.PathEscape(orgID)+"/projects", o.query(), nil, &p)
}

// GetProject reads one project.
func (c *Client) GetProject(ctx context.Context, projectID string) (Project, error) {
	var p Project
	return p, c.Do(ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(projectID), nil, nil, &p)
}

// CreateProject creates a project in an org (projects.create on the org).
func (c *Client) CreateProject(ctx context.Context, orgID, slug, name, description string, opts ...RequestOption) (Project, error) {
	var p Project
	in := map[string]string{"slug": slug, "name": name}
	if description != "" {
		in["description"] = description
	}
	return p, c.Do(ctx, http.MethodPost, "/api/v1/orgs/"+url.PathEscape(orgID)+"/projects", nil, in, &p, opts...)
}
