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
		Long: `Write a working app into DIR (created when missing), from one of the
templates:

  http          a Go HTTP service (FROM scratch) that reports its own usage
  jupyter       JupyterLab on a CUDA image, behind the platform's UI gateway
  vllm-compose  vLLM's OpenAI server (the vllm_openai Compose renderer) with
                a metering proxy counting tokens
  controller    a cluster app in the Slurm pattern: the controller when
                launched, a worker when added as an instance member

Each has a readiness endpoint, a clean stop on SIGTERM and launch parameters
read from GPUAAS_PARAMETERS; those that report to the platform (http,
vllm-compose, controller) do it as the instance itself (its mounted key,
token exchange and renewal, reports with stable event ids). Its manifest
gpuaas.yaml validates as written, and smoke.yaml holds what gpuaas app smoke
checks. DIR must be empty unless --force. Next steps are printed, and are in
DIR/README.md; docs/app-templates.md has more.`,
		Example: `  gpuaas init hello --template http
  gpuaas init cluster --template controller
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
