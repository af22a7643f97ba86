package cli

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/gpuaas/gpuaas/client"
)

func init() { commandFactories = append(commandFactories, newOrgCmd, newProjectCmd) }

// envOrg stands in for --org, as GPUAAS_PROJECT_ID does for --project.
const envOrg = "GPUAAS_ORG_ID"

// orgFlag gives cmd --org, an id or slug that falls back to GPUAAS_ORG_ID.
func orgFlag(cmd *cobra.Command, persistent bool, usage string) {
	fs := cmd.Flags()
	if persistent {
		fs = cmd.PersistentFlags()
	}
	fs.String("org", "", usage+" (id or slug; env "+envOrg+")")
}

// orgOf resolves --org (or GPUAAS_ORG_ID) to an org id; "" when neither is set.
func orgOf(cmd *cobra.Command, c *client.Client) (string, error) {
	return resolveOrg(cmd.Context(), c, flagOrEnv(cmd, "org", envOrg))
}

// orgClient is orgOf plus the client it resolved with (as projectClient).
func orgClient(cmd *cobra.Command) (string, *client.Client, error) {
	c, err := apiClient(cmd)
	if err != nil {
		return "", nil, err
	}
	org, err := orgOf(cmd, c)
	return org, c, err
}

func newOrgCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "org", Short: "Orgs: the tenants that own projects"}
	var f pageFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "List the orgs you can see",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			page, err := c.ListOrgs(cmd.Context(), f.options())
			if err != nil {
				return err
			}
			return printResult(cmd, page, "id", "slug", "name", "created_at")
		},
	}
	f.add(list)
	get := &cobra.Command{
		Use:   "get ORG",
		Short: "Show one org (by id or slug)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			id, err := resolveOrg(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			o, err := c.GetOrg(cmd.Context(), id)
			if err != nil {
				return err
			}
			return printResult(cmd, o, "id", "slug", "name", "created_at")
		},
	}
	var slug, name string
	create := &cobra.Command{
		Use:   "create --slug SLUG --name NAME",
		Short: "Create an org (platform admins)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			o, err := c.CreateOrg(cmd.Context(), slug, name)
			if err != nil {
				return err
			}
			return printResult(cmd, o, "id", "slug", "name", "created_at")
		},
	}
	create.Flags().StringVar(&slug, "slug", "", "slug, unique on the platform")
	create.Flags().StringVar(&name, "name", "", "display name")
	_ = create.MarkFlagRequired("slug")
	_ = create.MarkFlagRequired("name")
	cmd.AddCommand(list, get, create)
	addClientFlags(cmd)
	return cmd
}

func newProjectCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "project", Short: "Projects: where accounts, artifacts, allocations and instances live"}
	var f pageFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "List the projects of --org, or of every org you can see",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			org, c, err := orgClient(cmd)
			if err != nil {
				return err
			}
			if org != "" {
				page, err := c.ListProjects(cmd.Context(), org, f.options())
				if err != nil {
					return err
				}
				return printResult(cmd, page, "id", "org_id", "slug", "name", "created_at")
			}
			if f.cursor != "" {
				return errors.New("--cursor pages one org's list: name it with --org")
			}
			all, err := projectsOfEveryOrg(cmd.Context(), c)
			if err != nil {
				return err
			}
			return printResult(cmd, client.CatalogPage[client.Project]{Items: all}, "id", "org_id", "slug", "name", "created_at")
		},
	}
	f.add(list)
	orgFlag(list, false, "only this org's projects")
	get := &cobra.Command{
		Use:   "get [PROJECT]",
		Short: "Show one project (id, slug or ORG/PROJECT; default --project or GPUAAS_PROJECT_ID)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				_ = cmd.Flags().Set("project", args[0])
			}
			id, c, err := projectClient(cmd)
			if err != nil {
				return err
			}
			p, err := c.GetProject(cmd.Context(), id)
			if err != nil {
				return err
			}
			return printResult(cmd, p, "id", "org_id", "slug", "name", "description", "created_at")
		},
	}
	projectFlag(get, false)
	var slug, name, description string
	create := &cobra.Command{
		Use:   "create --org ORG --slug SLUG --name NAME",
		Short: "Create a project in an org (org admins)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			org, c, err := orgClient(cmd)
			if err != nil {
				return err
			}
			if org == "" {
				return errors.New("name the org with --org or " + envOrg + " (gpuaas org list shows yours)")
			}
			p, err := c.CreateProject(cmd.Context(), org, slug, name, description)
			if err != nil {
				return err
			}
			return printResult(cmd, p, "id", "org_id", "slug", "name", "description", "created_at")
		},
	}
	orgFlag(create, false, "the org to create the project in")
	create.Flags().StringVar(&slug, "slug", "", "slug, unique in the org")
	create.Flags().StringVar(&name, "name", "", "display name")
	create.Flags().StringVar(&description, "description", "", "what the project is for")
	_ = create.MarkFlagRequired("slug")
	_ = create.MarkFlagRequired("name")
	cmd.AddCommand(list, get, create, newProjectStorageCmd())
	addClientFlags(cmd)
	return cmd
}

// projectsOfEveryOrg lists the projects of every org the caller can see.
func projectsOfEveryOrg(ctx context.Context, c *client.Client) ([]client.Project, error) {
	orgs, err := c.ListOrgs(ctx, client.CatalogListOptions{Limit: 500})
	if err != nil {
		return nil, err
	}
	var all []client.Project
	for _, o := range orgs.Items {
		opts := client.CatalogListOptions{Limit: 500}
		seen := map[string]bool{}
		for {
			page, err := c.ListProjects(ctx, o.ID, opts)
			if err != nil {
				return nil, err
			}
			all = append(all, page.Items...)
			if page.NextCursor == "" {
				break
			}
			if err := followCursor(seen, page.NextCursor, "the project list of org "+o.ID); err != nil {
				return nil, err
			}
			opts.Cursor = page.NextCursor
		}
	}
	return all, nil
}
