package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/gpuaas/gpuaas/client"
)

// Wherever a command takes an id it also takes a slug (`sa get publisher`,
// `--project dev`, `--org dev`). Ids pass through untouched; anything else
// is looked up among what the caller can list, so a slug never reaches a
// resource the caller could not name by id.

func isID(s string) bool { _, err := uuid.Parse(s); return err == nil }

type slugged struct {
	ID   string `json:"id"`
	Slug string `json:"slug"`
}

type sluggedPage struct {
	Items      []slugged `json:"items"`
	NextCursor string    `json:"next_cursor"`
}

// findSlug walks the pages of a list endpoint for slug.
func findSlug(ctx context.Context, c *client.Client, path, slug, what string) (string, error) {
	q := url.Values{"limit": {"500"}}
	seen := map[string]bool{}
	for {
		var p sluggedPage
		if err := c.Do(ctx, http.MethodGet, path, q, nil, &p); err != nil {
			return "", err
		}
		for _, it := range p.Items {
			if it.Slug == slug {
				return it.ID, nil
			}
		}
		if p.NextCursor == "" {
			return "", fmt.Errorf("no %s with id or slug %q is visible to you", what, slug)
		}
		if err := followCursor(seen, p.NextCursor, "the "+what+" list"); err != nil {
			return "", err
		}
		q.Set("cursor", p.NextCursor)
	}
}

// followCursor records next, a list's next_cursor, in seen and refuses a
// cursor seen before: a server answering one again would otherwise have
// the CLI request the same pages for ever.
func followCursor(seen map[string]bool, next, list string) error {
	if seen[next] {
		return fmt.Errorf("the server answered next_cursor %q twice in %s: stopped instead of listing for ever (a fault of the server; tell its operator)", next, list)
	}
	seen[next] = true
	return nil
}

// resolveOrg turns an org id or slug into an org id.
func resolveOrg(ctx context.Context, c *client.Client, ref string) (string, error) {
	if ref == "" || isID(ref) {
		return ref, nil
	}
	return findSlug(ctx, c, "/api/v1/orgs", ref, "org")
}

// resolveProject turns a project id or slug ("dev", or "org/project" to
// pick among orgs) into a project id.
func resolveProject(ctx context.Context, c *client.Client, ref string) (string, error) {
	if ref == "" || isID(ref) {
		return ref, nil
	}
	orgRef, slug, scoped := strings.Cut(ref, "/")
	if !scoped {
		slug = ref
	}
	var orgs []string
	if scoped {
		id, err := resolveOrg(ctx, c, orgRef)
		if err != nil {
			return "", err
		}
		orgs = []string{id}
	} else {
		// A service account sees its own project, not the org list.
		if me, err := c.Me(ctx); err == nil && me.ProjectID != "" {
			var p slugged
			if err := c.Do(ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(me.ProjectID), nil, nil, &p); err == nil && p.Slug == slug {
				return p.ID, nil
			}
		}
		var p sluggedPage
		if err := c.Do(ctx, http.MethodGet, "/api/v1/orgs", url.Values{"limit": {"500"}}, nil, &p); err != nil {
			return "", err
		}
		for _, o := range p.Items {
			orgs = append(orgs, o.ID)
		}
	}
	var found []string
	for _, o := range orgs {
		id, err := findSlug(ctx, c, "/api/v1/orgs/"+url.PathEscape(o)+"/projects", slug, "project")
		var apiErr *client.APIError
		switch {
		case err == nil:
			found = append(found, id)
		case errors.As(err, &apiErr):
			return "", err
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no project with id or slug %q is visible to you", ref)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("project slug %q is in %d orgs: name it as ORG/PROJECT or by id", ref, len(found))
}

// resolveServiceAccount turns a service account id or slug into its id.
func resolveServiceAccount(ctx context.Context, c *client.Client, project, ref string) (string, error) {
	if isID(ref) {
		return ref, nil
	}
	return findSlug(ctx, c, "/api/v1/projects/"+url.PathEscape(project)+"/service-accounts", ref, "service account")
}

// resolveArtifact turns an artifact id, or APP/VERSION/NAME, into its id.
// Of several registrations under one name the newest wins.
func resolveArtifact(ctx context.Context, c *client.Client, project, ref string) (string, error) {
	parts := strings.Split(ref, "/")
	if isID(ref) || len(parts) != 3 {
		return ref, nil
	}
	items, _, err := c.ListArtifacts(ctx, project, client.ArtifactFilter{AppSlug: parts[0], AppVersion: parts[1], ArtifactName: parts[2], Limit: 100})
	if err != nil {
		return "", err
	}
	if len(items) == 0 {
		return "", fmt.Errorf("no artifact %s is registered in this project: gpuaas artifact push --app %s --version %s --name %s", ref, parts[0], parts[1], parts[2])
	}
	latest := items[0]
	for _, a := range items[1:] {
		if a.CreatedAt > latest.CreatedAt {
			latest = a
		}
	}
	return latest.ID, nil
}

// projectFlag gives cmd --project, which takes an id or slug and falls
// back to GPUAAS_PROJECT_ID. Nouns declare it once (persistent) and read it
// with projectClient.
func projectFlag(cmd *cobra.Command, persistent bool) {
	fs := cmd.Flags()
	if persistent {
		fs = cmd.PersistentFlags()
	}
	fs.String("project", "", "project id or slug (env GPUAAS_PROJECT_ID)")
}
