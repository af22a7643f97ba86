package store

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/iam"
)

func (q *Queries) CreateOrg(ctx context.Context, o iam.Org) error {
	_, err := q.exec(ctx, `INSERT INTO orgs (id, slug, name, created_at) VALUES (?, ?, ?, ?)`,
		o.ID, o.Slug, o.Name, ts(o.CreatedAt))
	return err
}

const orgCols = `id, slug, name, created_at`

func scanOrg(s interface{ Scan(...any) error }) (iam.Org, error) {
	var o iam.Org
	err := s.Scan(&o.ID, &o.Slug, &o.Name, scanTime(&o.CreatedAt))
	return o, err
}

func (q *Queries) GetOrg(ctx context.Context, id string) (iam.Org, error) {
	o, err := scanOrg(q.queryRow(ctx, `SELECT `+orgCols+` FROM orgs WHERE id = ?`, id))
	return o, scanOne(err)
}

func (q *Queries) GetOrgBySlug(ctx context.Context, slug string) (iam.Org, error) {
	o, err := scanOrg(q.queryRow(ctx, `SELECT `+orgCols+` FROM orgs WHERE slug = ?`, slug))
	return o, scanOne(err)
}

// ListOrgs lists orgs; when onlyIDs is non-nil, just those.
func (q *Queries) ListOrgs(ctx context.Context, onlyIDs []string, p Page) ([]iam.Org, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	query := `SELECT ` + orgCols + ` FROM orgs WHERE id > ?`
	args := []any{after}
	if onlyIDs != nil {
		if len(onlyIDs) == 0 {
			return nil, "", nil
		}
		query += ` AND id IN (` + placeholders(len(onlyIDs)) + `)`
		for _, id := range onlyIDs {
			args = append(args, id)
		}
	}
	rows, err := q.query(ctx, query+` ORDER BY id`+limitClause(limit), args...)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanOrg)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(o iam.Org) string { return o.ID })
	return out, next, nil
}

func (q *Queries) CreateProject(ctx context.Context, p iam.Project) error {
	_, err := q.exec(ctx, `INSERT INTO projects (id, org_id, slug, name, description, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		p.ID, p.OrgID, p.Slug, p.Name, p.Description, ts(p.CreatedAt))
	return err
}

const projectCols = `id, org_id, slug, name, description, created_at`

func scanProject(s interface{ Scan(...any) error }) (iam.Project, error) {
	var p iam.Project
	err := s.Scan(&p.ID, &p.OrgID, &p.Slug, &p.Name, &p.Description, scanTime(&p.CreatedAt))
	return p, err
}

func (q *Queries) GetProject(ctx context.Context, id string) (iam.Project, error) {
	p, err := scanProject(q.queryRow(ctx, `SELECT `+projectCols+` FROM projects WHERE id = ?`, id))
	return p, scanOne(err)
}

func (q *Queries) GetProjectBySlug(ctx context.Context, orgID, slug string) (iam.Project, error) {
	p, err := scanProject(q.queryRow(ctx, `SELECT `+projectCols+` FROM projects WHERE org_id = ? AND slug = ?`, orgID, slug))
	return p, scanOne(err)
}

// ListProjects lists the projects of an org; when onlyIDs is non-nil, just those.
func (q *Queries) ListProjects(ctx context.Context, orgID string, onlyIDs []string, p Page) ([]iam.Project, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	query := `SELECT ` + projectCols + ` FROM projects WHERE org_id = ? AND id > ?`
	args := []any{orgID, after}
	if onlyIDs != nil {
		if len(onlyIDs) == 0 {
			return nil, "", nil
		}
		query += ` AND id IN (` + placeholders(len(onlyIDs)) + `)`
		for _, id := range onlyIDs {
			args = append(args, id)
		}
	}
	rows, err := q.query(ctx, query+` ORDER BY id`+limitClause(limit), args...)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanProject)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(p iam.Project) string { return p.ID })
	return out, next, nil
}

func placeholders(n int) string {
	b := make([]byte, 0, 2*n)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '?')
	}
	return string(b)
}
