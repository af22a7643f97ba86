package cli

import (
	"fmt"
	"path/filepath"

	"github.com/gpuaas/gpuaas/internal/bytesize"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/spf13/cobra"
)

func newRegistryCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "registry", Short: "Upkeep of the embedded OCI registry's storage (offline, like migrate)"}
	cmd.AddCommand(newRegistryGCCmd())
	return cmd
}

// registryGC is what gpuaas registry gc prints: the directory it
// collected and what it removed.
type registryGC struct {
	RegistryDir string `json:"registry_dir"`
	registry.GCResult
}

func newRegistryGCCmd() *cobra.Command {
	// The server's own flags and GPUAAS_* variables, so that one command
	// line or environment names one directory for both.
	cfg := config.Defaults()
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove the embedded registry's blobs that no manifest references (every server stopped)",
		Long: `Remove the blobs of the embedded registry that no manifest references any more:
what deleting manifests left on disk. Every manifest of every repository is
kept, tagged or not, with everything it references.

Run it with every replica stopped: a push between its mark and its sweep
would lose blobs. It refuses while any server has the registry directory
open, and a server does not start while it runs. --dry-run removes nothing
and reports what would be removed. Quota counts need nothing afterwards
(docs/operations.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.ApplyEnv(cmd.Flags(), nil); err != nil {
				return err
			}
			if cfg.RegistryURL != "" {
				return fmt.Errorf("the server uses the external registry %s (--registry-url, GPUAAS_REGISTRY_URL): collect its garbage with that registry's own tools; gpuaas registry gc cleans only the embedded registry", cfg.RegistryURL)
			}
			root, err := filepath.Abs(cfg.RegistryRoot())
			if err != nil {
				return err
			}
			res, err := registry.CollectGarbage(cmd.Context(), root, dryRun, nil)
			if err != nil {
				if res.Blobs > 0 && !dryRun {
					return fmt.Errorf("%w (after removing %d blob(s), %s; run it again)", err, res.Blobs, bytesize.Format(res.Bytes))
				}
				return err
			}
			verb := "removed"
			if dryRun {
				verb = "would remove (dry run: nothing removed)"
			}
			line := fmt.Sprintf("%s %d unreferenced blob(s), %s, and %d layer link(s) from %s", verb, res.Blobs, bytesize.Format(res.Bytes), res.LayerLinks, root)
			return printOutcome(cmd, line, registryGC{RegistryDir: root, GCResult: res}, "registry_dir", "dry_run", "blobs", "bytes", "layer_links")
		},
	}
	cfg.BindRegistryStorage(cmd.Flags())
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "remove nothing: report what would be removed")
	return cmd
}
