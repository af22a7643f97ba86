package cli

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/manifest"
)

func init() { commandFactories = append(commandFactories, newManifestCmd) }

func newManifestCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "manifest",
		Short: "Validate and register app manifest packages",
	}
	cmd.AddCommand(newManifestValidateCmd(), newManifestRegisterCmd())
	return cmd
}

func newManifestValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Validate a manifest package offline (YAML or JSON); exit 1 on any problem",
		Long: `Validate a manifest package against the same JSON Schema files and rules
the server uses, without contacting a server. Each problem is printed as
FILE:LINE: POINTER: message; a valid package prints each version and its digest.
With -o json|yaml the same report is one document: valid, problems, versions.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := manifest.ValidateFile(args[0])
			if err != nil {
				return err
			}
			if err := printOr(cmd, false, r, r.WriteText); err != nil {
				return err
			}
			if !r.Valid {
				// A CI log shows the FILE:LINE lines even when stdout is a JSON report.
				if table, _ := tableFormat(cmd, false); !table {
					_ = manifest.WriteProblems(cmd.ErrOrStderr(), r.File, r.Problems)
				}
				return exitCode(1)
			}
			return nil
		},
	}
}

func newManifestRegisterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "register FILE",
		Short: "Register a manifest package: the app and its versions, as drafts (platform admin)",
		Long: `Validate FILE offline, then submit it unchanged to POST /api/v1/admin/apps/manifests.
New versions start as drafts; a platform admin publishes them with
'gpuaas app publish'. Re-registering an identical file changes nothing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			_, problems, err := manifest.Parse(data, path)
			if err != nil {
				return err
			}
			if len(problems) > 0 {
				if err := manifest.WriteProblems(cmd.ErrOrStderr(), path, problems); err != nil {
					return err
				}
				return exitCode(1)
			}
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			reg, err := c.RegisterManifest(cmd.Context(), path, data)
			var apiErr *client.APIError
			if errors.As(err, &apiErr) && apiErr.Code == "manifest_invalid" {
				fmt.Fprintln(cmd.ErrOrStderr(), apiErr.Message)
				return exitCode(1)
			}
			if err != nil {
				return err
			}
			if table, err := tableFormat(cmd, false); err != nil || !table {
				if err != nil {
					return err
				}
				return printResult(cmd, reg)
			}
			out := cmd.OutOrStdout()
			state := "registered"
			if !reg.Changed {
				state = "unchanged (identical to what is registered)"
			}
			fmt.Fprintf(out, "app %s: %s (app %s)\n", reg.App.Slug, state, reg.AppResult)
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tSTATUS\tRESULT\tDIGEST")
			for _, v := range reg.Versions {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Version, v.Status, v.Result, v.Digest)
			}
			return tw.Flush()
		},
	}
	addClientFlags(cmd)
	return cmd
}
