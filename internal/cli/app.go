package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuaas/gpuaas/client"
)

func init() { commandFactories = append(commandFactories, newAppCmd) }

func newAppCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "app",
		Short: "Browse the app catalog, manage version lifecycle, project entitlements and external workers",
	}
	cmd.AddCommand(newAppListCmd(), newAppVersionsCmd(), newAppCatalogCmd(),
		newAppTransitionCmd("publish", "Publish a draft version (platform admin; its artifacts must be active and verified)"),
		newAppTransitionCmd("deprecate", "Deprecate a published version: existing instances continue, no new launches"),
		newAppTransitionCmd("retire", "Retire a deprecated version (refused while a live instance uses it)"),
		newAppEntitleCmd(), newAppEntitlementsCmd(), newAppPreviewCmd(), newAppSmokeCmd(), newAppWorkerCmd())
	addClientFlags(cmd)
	projectFlag(cmd, true)
	return cmd
}

// pageFlags are the paging and output flags of the catalog list commands.
type pageFlags struct {
	limit  int
	cursor string
	asJSON bool
}

func (f *pageFlags) add(cmd *cobra.Command) {
	cmd.Flags().IntVar(&f.limit, "limit", 0, "page size (1-500)")
	cmd.Flags().StringVar(&f.cursor, "cursor", "", "cursor from a previous page")
	addJSONAlias(cmd, &f.asJSON)
}

func (f *pageFlags) options() client.CatalogListOptions {
	return client.CatalogListOptions{Limit: f.limit, Cursor: f.cursor}
}

// printPage prints a page as printResult does, or as a table under header,
// one row per item, ending with the cursor of the next page when there is one.
func printPage[T any](cmd *cobra.Command, f *pageFlags, page client.CatalogPage[T], header string, row func(T) string) error {
	return printOr(cmd, f.asJSON, page, func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, header)
		for _, it := range page.Items {
			fmt.Fprintln(tw, row(it))
		}
		return flushWithCursor(tw, page.NextCursor)
	})
}

func newAppListCmd() *cobra.Command {
	var f pageFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the raw platform catalog (not filtered by entitlements)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			page, err := c.ListCatalog(cmd.Context(), f.options())
			if err != nil {
				return err
			}
			return printPage(cmd, &f, page, "SLUG\tNAME\tBACKEND\tCATEGORY", func(a client.CatalogApp) string {
				return a.Slug + "\t" + a.DisplayName + "\t" + a.RuntimeBackend + "\t" + a.Category
			})
		},
	}
	f.add(cmd)
	return cmd
}

func newAppVersionsCmd() *cobra.Command {
	var (
		status string
		f      pageFlags
	)
	cmd := &cobra.Command{
		Use:   "versions APP",
		Short: "List an app's versions (drafts and retired versions: platform admins only)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			page, err := c.ListAppVersions(cmd.Context(), args[0], status, f.options())
			if err != nil {
				return err
			}
			return printPage(cmd, &f, page, "VERSION\tSTATUS\tBACKEND\tDIGEST", func(v client.AppVersion) string {
				return v.Version + "\t" + v.Status + "\t" + v.RuntimeBackend + "\t" + v.Digest
			})
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only versions in this status (draft, published, deprecated, retired)")
	f.add(cmd)
	return cmd
}

func newAppCatalogCmd() *cobra.Command {
	var (
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "catalog --project ID",
		Short: "List the apps a project is entitled to and their launchable versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			project, c, err := projectClient(cmd)
			if err != nil {
				return err
			}
			page, err := c.ProjectCatalog(cmd.Context(), project, client.CatalogListOptions{Limit: 500})
			if err != nil {
				return err
			}
			if table, err := tableFormat(cmd, asJSON); err != nil || !table {
				if err != nil {
					return err
				}
				return printResult(cmd, page)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SLUG\tNAME\tLAUNCHABLE VERSIONS")
			for _, e := range page.Items {
				vs := ""
				for i, v := range e.Versions {
					if i > 0 {
						vs += ", "
					}
					vs += v.Version
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", e.App.Slug, e.App.DisplayName, vs)
			}
			return tw.Flush()
		},
	}
	addJSONAlias(cmd, &asJSON)
	return cmd
}

func newAppTransitionCmd(action, short string) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   action + " APP VERSION --reason TEXT",
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			v, err := c.TransitionAppVersion(cmd.Context(), args[0], args[1], action, reason)
			if err != nil {
				return err
			}
			if table, err := tableFormat(cmd, false); err != nil || !table {
				if err != nil {
					return err
				}
				return printResult(cmd, v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s is now %s\n", v.AppSlug, v.Version, v.Status)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the audit log; required)")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

func newAppEntitleCmd() *cobra.Command {
	var (
		disable bool
		org     string
		o       client.PolicyOverrides
	)
	cmd := &cobra.Command{
		Use:   "entitle APP (--project ID | --org ID)",
		Short: "Enable (or --disable) an app for a project (project admin) or a whole org (org admin), optionally narrowing modes, scopes and versions",
		Long: "Enable (or --disable) an app for a project, or with --org for an org: launches of the org's shared\n" +
			"instances (control_plane_scope tenant) are checked against the org's entitlement, not the project's.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var e client.Entitlement
			if org != "" {
				c, err := apiClient(cmd)
				if err != nil {
					return err
				}
				if e, err = c.PutOrgEntitlement(cmd.Context(), org, args[0], !disable, o); err != nil {
					return err
				}
				return printJSON(cmd, e)
			}
			project, c, err := projectClient(cmd)
			if err != nil {
				return err
			}
			if e, err = c.PutEntitlement(cmd.Context(), project, args[0], !disable, o); err != nil {
				return err
			}
			return printJSON(cmd, e)
		},
	}
	cmd.Flags().BoolVar(&disable, "disable", false, "disable the entitlement instead of enabling it")
	cmd.Flags().StringVar(&org, "org", "", "entitle this org (its shared instances) instead of a project")
	cmd.Flags().StringSliceVar(&o.AllowedOperatingModes, "mode", nil, "allowed operating mode (repeatable): tenant_dedicated, platform_managed")
	cmd.Flags().StringSliceVar(&o.AllowedControlPlaneScopes, "scope", nil, "allowed control-plane scope (repeatable): project, tenant, platform")
	cmd.Flags().StringSliceVar(&o.AllowedVersions, "version", nil, "allowed version (repeatable); none means every published version")
	cmd.Flags().BoolVar(&o.CanaryOptIn, "canary", false, "opt the project into canary artifacts")
	return cmd
}

func newAppEntitlementsCmd() *cobra.Command {
	var org string
	cmd := &cobra.Command{
		Use:   "entitlements (--project ID | --org ID)",
		Short: "List a project's (or an org's) app entitlements",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var page client.CatalogPage[client.Entitlement]
			if org != "" {
				c, err := apiClient(cmd)
				if err != nil {
					return err
				}
				if page, err = c.ListOrgEntitlements(cmd.Context(), org, client.CatalogListOptions{Limit: 500}); err != nil {
					return err
				}
				return printJSON(cmd, page)
			}
			project, c, err := projectClient(cmd)
			if err != nil {
				return err
			}
			if page, err = c.ListEntitlements(cmd.Context(), project, client.CatalogListOptions{Limit: 500}); err != nil {
				return err
			}
			return printJSON(cmd, page)
		},
	}
	cmd.Flags().StringVar(&org, "org", "", "list this org's entitlements instead of a project's")
	return cmd
}

func newAppPreviewCmd() *cobra.Command {
	var (
		req                           client.LaunchRequest
		gpus, cpus, mem, port         int
		config, placement, parameters string
	)
	cmd := &cobra.Command{
		Use:   "preview APP VERSION --project ID",
		Short: "Resolve a launch without creating anything: effective values or field errors",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			res := &client.LaunchResource{}
			set := false
			for _, f := range []struct {
				name string
				v    int
				dst  **int
			}{{"gpus", gpus, &res.GPUCount}, {"cpus", cpus, &res.CPUCores}, {"memory-gib", mem, &res.MemoryGiB}, {"host-port", port, &res.HostPort}} {
				if cmd.Flags().Changed(f.name) {
					v := f.v
					*f.dst, set = &v, true
				}
			}
			if set {
				req.Resources = res
			}
			for _, d := range []struct {
				name, v string
				dst     *json.RawMessage
			}{{"config", config, &req.Config}, {"placement", placement, &req.PlacementIntent}, {"params", parameters, &req.Parameters}} {
				if d.v == "" {
					continue
				}
				if !json.Valid([]byte(d.v)) {
					return fmt.Errorf("--%s must be a JSON document", d.name)
				}
				*d.dst = json.RawMessage(d.v)
			}
			project, c, err := projectClient(cmd)
			if err != nil {
				return err
			}
			eff, err := c.PreviewLaunch(cmd.Context(), project, args[0], args[1], req)
			if err != nil {
				return err
			}
			if err := printJSON(cmd, eff); err != nil {
				return err
			}
			// Preview runs create's checks: what create would refuse fails here too.
			if r := eff.LaunchRefusal; r != nil {
				e := r.APIError
				e.Status = r.Status
				return failure{"a launch with these values would be refused: " + describeError(cmd, &e)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&req.OperatingMode, "mode", "", "operating mode hint")
	cmd.Flags().StringVar(&req.ControlPlaneScope, "scope", "", "control-plane scope hint")
	cmd.Flags().IntVar(&gpus, "gpus", 0, "GPU count")
	cmd.Flags().IntVar(&cpus, "cpus", 0, "CPU cores")
	cmd.Flags().IntVar(&mem, "memory-gib", 0, "memory in GiB")
	cmd.Flags().IntVar(&port, "host-port", 0, "host port")
	cmd.Flags().StringVar(&config, "config", "", "config as JSON")
	cmd.Flags().StringVar(&placement, "placement", "", "placement intent as JSON")
	cmd.Flags().StringVar(&parameters, "params", "", "launch parameters as JSON")
	return cmd
}

func newAppWorkerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "worker",
		Aliases: []string{"workers"},
		Short:   "Grant, revoke and list the service accounts that work an app's operations as its external worker (platform admins)",
		Long: `An app whose runtime is driven outside the platform (runtime_backend slurm, ray
or bare_metal, with an external_worker_contract) has its instances' lifecycle
operations carried out by an external worker. A service account granted to the
app, of any project, acquires the app's operations under a lease and carries
them out as its external worker: it heartbeats them and completes or fails them
(docs/external-workers.md). Granting, revoking and listing are for platform admins.`,
	}
	cmd.AddCommand(newAppWorkerGrantCmd(), newAppWorkerRevokeCmd(), newAppWorkerListCmd())
	return cmd
}

// workerHeader and workerRow are the table form of worker grants.
const workerHeader = "SERVICE ACCOUNT\tPROJECT\tGRANTED BY\tGRANTED AT"

func workerRow(g client.AppWorkerGrant) string {
	return g.ServiceAccountID + "\t" + g.ProjectID + "\t" + g.GrantedBy + "\t" + g.CreatedAt
}

func newAppWorkerGrantCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "grant APP_SLUG SERVICE_ACCOUNT_ID",
		Short: "Let a service account (of any project) work the app's operations as its external worker",
		Long: `Grants a service account, of any project, to the app: its worker then acquires
the app's instances' lifecycle operations and carries them out as the app's
external worker (docs/external-workers.md). Granting again changes nothing.
Platform admins only.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			g, err := c.GrantAppWorker(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			return printOr(cmd, asJSON, g, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "service account %s (project %s) works the operations of %s\n", g.ServiceAccountID, g.ProjectID, g.AppSlug)
				return err
			})
		},
	}
	addJSONAlias(cmd, &asJSON)
	return cmd
}

func newAppWorkerRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke APP_SLUG SERVICE_ACCOUNT_ID",
		Short: "Withdraw a service account's grant: it acquires nothing more of the app",
		Long: `Withdraws a grant: the service account acquires no more of the app's operations.
An operation it holds goes to another granted worker once its lease expires.
Platform admins only.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			if err := c.RevokeAppWorker(cmd.Context(), args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Revoked service account %s as a worker of %s\n", args[1], args[0])
			return printResult(cmd, map[string]any{"app_slug": args[0], "service_account_id": args[1], "revoked": true})
		},
	}
}

func newAppWorkerListCmd() *cobra.Command {
	var f pageFlags
	cmd := &cobra.Command{
		Use:   "list APP_SLUG",
		Short: "List the service accounts granted to an app as its external workers",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			page, err := c.ListAppWorkers(cmd.Context(), args[0], f.options())
			if err != nil {
				return err
			}
			return printPage(cmd, &f, page, workerHeader, workerRow)
		},
	}
	f.add(cmd)
	return cmd
}
