package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpuaas/gpuaas/internal/cloudinit"
	"github.com/gpuaas/gpuaas/internal/manifest"
)

func init() { commandFactories = append(commandFactories, newCloudInitCmd) }

func newCloudInitCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cloudinit",
		Short: "Check the cloud-init user-data an app uses to bootstrap its machines",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "validate FILE",
		Short: "Validate a #cloud-config bootstrap offline; exit 1 on any problem",
		Long: `Validate a cloud-init user-data document (#cloud-config) before an app
ships it: the header, the 16 KiB limit, the shape of each module gpuaas
accepts (an unknown key is named, with the closest known one), and that it
carries no credential (passwords, chpasswd, host keys, private keys): a
machine's user-data is readable on it, so secrets go through the
access-credential APIs. Problems print as FILE:LINE: POINTER: message.
examples/cloud-init/bootstrap.yaml is a template that passes.`,
		Example: "  gpuaas cloudinit validate bootstrap.yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			r := cloudInitReport{File: args[0], Problems: cloudinit.Validate(data)}
			r.Valid = len(r.Problems) == 0
			if r.Problems == nil {
				r.Problems = []manifest.Problem{}
			}
			if err := printOr(cmd, false, r, r.writeText); err != nil {
				return err
			}
			if !r.Valid {
				return exitCode(1)
			}
			return nil
		},
	})
	return cmd
}

type cloudInitReport struct {
	File     string             `json:"file"`
	Valid    bool               `json:"valid"`
	Problems []manifest.Problem `json:"problems"`
}

func (r cloudInitReport) writeText(w io.Writer) error {
	if r.Valid {
		_, err := fmt.Fprintf(w, "%s: ok: a cloud-config gpuaas accepts\n", r.File)
		return err
	}
	return manifest.WriteProblems(w, r.File, r.Problems)
}
