// Package cli is the gpuaas command line: the server roles (dev, server,
// migrate) and, for people and automation, the API nouns.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
)

// Version is set at build time (-ldflags "-X …/cli.Version=v1.2.3").
var Version = "dev"

// Execute runs the command line and returns the process exit code.
func Execute() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRoot(os.Stdout, os.Stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		if code, ok := err.(exitCode); ok {
			return int(code)
		}
		fmt.Fprintln(os.Stderr, "error:", describeError(err))
		return 1
	}
	return 0
}

// exitCode ends a command with a status and no further message.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// NewRoot builds the command tree writing to out and errOut.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "gpuaas",
		Short:         "Control plane of a GPU cloud's app platform",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(newVersionCmd(), newDevCmd(), newServerCmd(), newMigrateCmd())
	root.AddCommand(apiCommands()...)
	addOutputFlag(root)
	requireKnownSubcommands(root)
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the gpuaas version",
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := Version
			if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						v += "+" + s.Value
					}
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), "gpuaas", v)
			return nil
		},
	}
}
