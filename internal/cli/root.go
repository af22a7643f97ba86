// Package cli is the gpuaas command line: the server roles (dev, server,
// migrate) and, for people and automation, the API nouns.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpuaas/gpuaas/internal/buildinfo"
)

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
	root.AddCommand(newVersionCmd(), newDevCmd(), newServerCmd(), newMigrateCmd(), newAgentCmd())
	root.AddCommand(apiCommands()...)
	addOutputFlag(root)
	requireKnownSubcommands(root)
	return root
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the gpuaas version, commit and build date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := buildinfo.Read()
			return printOr(cmd, asJSON, in, func(out io.Writer) error {
				modified := ""
				if in.Modified {
					modified = " (modified)"
				}
				_, err := fmt.Fprintf(out, "gpuaas %s\ncommit:  %s%s\nbuilt:   %s\ngo:      %s\n", in.Version, in.Commit, modified, in.Date, in.GoVersion)
				return err
			})
		},
	}
	addJSONAlias(cmd, &asJSON)
	return cmd
}
