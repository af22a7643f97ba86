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
	cmd.AddCommand(newManifestValidateCmd(), newManifestRegisterCmd(), newManifestRenderCmd())
	return cmd
}

// setFlag adds --set KEY=VALUE (repeatable) to a manifest command.
func setFlag(cmd *cobra.Command) *[]string {
	return cmd.Flags().StringArray("set", nil, "replace a manifest value before use: version=V, image_ref=REGISTRY/REPO@sha256:…, artifact.NAME=REPO@sha256:…, or a dotted path like version.runtime_profile.args=[a,b] (repeatable)")
}

// readManifest reads path and applies the --set values. name is what
// problems are reported against: the file, marked when it was changed.
func readManifest(path string, sets []string) (data []byte, name string, err error) {
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	if len(sets) == 0 {
		return data, path, nil
	}
	var settings []manifest.Setting
	for _, s := range sets {
		st, err := manifest.ParseSetting(s)
		if err != nil {
			return nil, "", usageError{err.Error()}
		}
		settings = append(settings, st)
	}
	data, err = manifest.Render(data, path, settings)
	if err != nil {
		return nil, "", usageError{path + ": " + err.Error()}
	}
	return data, path + " (with --set)", nil
}

func newManifestRenderCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "render FILE --set KEY=VALUE…",
		Short: "Write a manifest with values replaced (the version CI built, the digest it pushed), validated",
		Long: `Apply each --set to FILE and print the result (or write it to --out),
keeping the file's syntax, comments and key order. The result is validated
like 'manifest validate'; on any problem nothing is written and the exit
status is 1. 'manifest validate' and 'manifest register' take the same --set
flags, so a CI job can register without an intermediate file:

  gpuaas manifest register app.yaml --set version=1.4.0 --set image_ref="$IMAGE_REF"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, name, err := readManifest(args[0], *sets(cmd))
			if err != nil {
				return err
			}
			_, problems, err := manifest.Parse(data, args[0])
			if err != nil {
				return err
			}
			if len(problems) > 0 {
				_ = manifest.WriteProblems(cmd.ErrOrStderr(), name, problems)
				return exitCode(1)
			}
			if out == "" {
				_, err = cmd.OutOrStdout().Write(data)
				return err
			}
			return os.WriteFile(out, data, 0o644)
		},
	}
	setFlag(cmd)
	cmd.Flags().StringVar(&out, "out", "", "write the rendered manifest to this file instead of standard output")
	return cmd
}

func sets(cmd *cobra.Command) *[]string {
	v, _ := cmd.Flags().GetStringArray("set")
	return &v
}

func newManifestValidateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "validate FILE",
		Short: "Validate a manifest package offline (YAML or JSON); exit 1 on any problem",
		Long: `Validate a manifest package against the same JSON Schema files and rules
the server uses, without contacting a server. Each problem is printed as
FILE:LINE: POINTER: message; a valid package prints each version and its digest.
With -o json|yaml the same report is one document: valid, problems, versions.
--set replaces values first (see 'manifest render').`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, name, err := readManifest(args[0], *sets(cmd))
			if err != nil {
				return err
			}
			r, err := manifest.Validate(data, name)
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
	setFlag(cmd)
	return cmd
}

func newManifestRegisterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "register FILE",
		Short: "Register a manifest package: the app and its versions, as drafts (platform admin)",
		Long: `Validate FILE offline, then submit it unchanged to POST /api/v1/admin/apps/manifests.
New versions start as drafts; a platform admin publishes them with

'gpuaas app publish'. Re-registering an identical file changes nothing.
--set replaces values first (see 'manifest render'); what is submitted is
the rendered document.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			data, name, err := readManifest(path, *sets(cmd))
			if err != nil {
				return err
			}
			_, problems, err := manifest.Parse(data, path)
			if err != nil {
				return err
			}
			if len(problems) > 0 {
				if err := manifest.WriteProblems(cmd.ErrOrStderr(), name, problems); err != nil {
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
	setFlag(cmd)
	addClientFlags(cmd)
	return cmd
}
