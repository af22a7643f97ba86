package iam

import (
	"context"
	"errors"
	"strings"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// CreateOrgInput is the body of an org creation.
type CreateOrgInput struct {
	Slug string `json:"slug"`
	Name string `json:"name"`
}

func validateSlugName(slug, name string) []errdefs.FieldError {
	var fe []errdefs.FieldError
	if !ValidSlug(slug) {
		fe = append(fe, errdefs.FieldError{Field: "/slug", Code: "invalid_slug",
			Message: "must be 2-63 characters of lowercase letters, digits and hyphens, starting with a letter"})
	}
	if strings.TrimSpace(name) == "" || len(name) > 200 {
		fe = append(fe, errdefs.FieldError{Field: "/name", Code: "invalid_name", Message: "must be 1-200 characters"})
	}
	return fe
}

// CreateOrg creates a tenant (platform admins only).
func (s *Service) CreateOrg(ctx context.Context, g *Grants, in CreateOrgInput) (Org, error) {
	if err := s.RequirePlatform(ctx, g, PermOrgsCreate, "org"); err != nil {
		return Org{}, err
	}
	if fe := validateSlugName(in.Slug, in.Name); fe != nil {
		return Org{}, errdefs.Validation(fe)
	}
	o := Org{ID: NewID(), Slug: in.Slug, Name: in.Name, CreatedAt: s.now()}
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.CreateOrg(ctx, o); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "org.create", ResourceType: "org", ResourceID: o.ID, OrgID: o.ID}, nil, o)
	})
	if errors.Is(err, storage.ErrAlreadyExists) {
		return Org{}, errdefs.AlreadyExists("org_exists", "an org with slug %q already exists; pick another slug", in.Slug)
	}
	return o, err
}

// ListOrgs lists the orgs the principal can see.
func (s *Service) ListOrgs(ctx context.Context, g *Grants, p storage.Page) ([]Org, string, error) {
	return s.Store.Read().ListOrgs(ctx, g.OrgIDs(), p)
}

// CreateProjectInput is the body of a project creation.
type CreateProjectInput struct {
	Slug        string `json:"slug"`
	Name        string `json:"name"`
	Description string `json:"description"`
}

// CreateProject creates a project in an org.
func (s *Service) CreateProject(ctx context.Context, g *Grants, orgID string, in CreateProjectInput) (Project, error) {
	o, err := s.Org(ctx, g, orgID, PermProjectsCreate)
	if err != nil {
		return Project{}, err
	}
	fe := validateSlugName(in.Slug, in.Name)
	if len(in.Description) > 2000 {
		fe = append(fe, errdefs.FieldError{Field: "/description", Code: "too_long", Message: "must be at most 2000 characters"})
	}
	if fe != nil {
		return Project{}, errdefs.Validation(fe)
	}
	p := Project{ID: NewID(), OrgID: o.ID, Slug: in.Slug, Name: in.Name, Description: in.Description, CreatedAt: s.now()}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.CreateProject(ctx, p); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "project.create", ResourceType: "project", ResourceID: p.ID, OrgID: o.ID, ProjectID: p.ID}, nil, p)
	})
	if errors.Is(err, storage.ErrAlreadyExists) {
		return Project{}, errdefs.AlreadyExists("project_exists", "org %q already has a project with slug %q; pick another slug", o.Slug, in.Slug)
	}
	return p, err
}

// ListProjects lists the projects of an org the principal can see.
func (s *Service) ListProjects(ctx context.Context, g *Grants, orgID string, p storage.Page) ([]Project, string, error) {
	o, err := s.Org(ctx, g, orgID, "")
	if err != nil {
		return nil, "", err
	}
	return s.Store.Read().ListProjects(ctx, o.ID, g.ProjectIDsIn(o.ID), p)
}
