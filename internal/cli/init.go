package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuaas/gpuaas/internal/scaffold"
)

func init() { commandFactories = append(commandFactories, newInitCmd) }

func newInitCmd() *cobra.Command {
	var o scaffold.Options
	cmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Start a new app in DIR from a template: source, manifest, Dockerfile, README, CI workflow",
		Long: `Write a working app into DIR (created when missing). The http template is
a Go HTTP server with a readiness endpoint, a clean stop on SIGTERM, launch
parameters read from GPUAAS_PARAMETERS, and usage reporting as the instance
itself (its mounted identity, token exchange and renewal, stable event ids);
its manifest gpuaas.yaml validates as written. DIR must be empty unless
--force. Next steps are printed, and are in DIR/README.md.`,
		Example: `  gpuaas init hello --template http
  gpuaas init ./svc --slug team-svc --display-name "Team service"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			files, err := scaffold.Write(dir, o)
			if err != nil {
				return usageError{err.Error()}
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "wrote %s (template %s):\n", dir, o.Template)
			for _, f := range files {
				fmt.Fprintf(w, "  %s\n", f)
			}
			fmt.Fprintf(w, "\nnext:\n  cd %s\n", dir)
			for _, line := range strings.Split(strings.TrimSpace(scaffold.Next(o.Template)), "\n") {
				fmt.Fprintf(w, "  %s\n", line)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Template, "template", "http", "what to start from: "+strings.Join(scaffold.Templates(), ", "))
	cmd.Flags().StringVar(&o.Slug, "slug", "", "the app's slug (default: DIR's name); a-z, 0-9 and '-', starting with a letter")
	cmd.Flags().StringVar(&o.DisplayName, "display-name", "", "the app's name in the catalog (default: from the slug)")
	cmd.Flags().StringVar(&o.Module, "module", "", "the Go module path (default: example.com/SLUG)")
	cmd.Flags().BoolVar(&o.Force, "force", false, "write into a directory that has files, replacing those of the same name")
	return cmd
}
