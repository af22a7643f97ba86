// Package cli is the gpuaas command line: the server roles (dev, server,
// migrate) and, for people and automation, the API nouns.
package cli

import (
	"context"
	"errors"
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
	return Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}

// Exit statuses of the command line (docs/cli.md).
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed, or its outcome is a failure
	exitUsage = 2 // the command line itself is wrong: nothing ran
)

// Run runs the command line args, reading in and writing to out and errOut, and returns
// the exit status: exitOK, exitError, or exitUsage for a usage error (an
// unknown command or flag, a missing argument, no command at all).
func Run(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	root := NewRoot(out, errOut)
	root.SetIn(in)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	if code, ok := err.(exitCode); ok {
		return int(code)
	}
	fmt.Fprintln(errOut, "error:", describeError(cmd, err))
	var u usageError
	if errors.As(err, &u) {
		return exitUsage
	}
	return exitError
}

// exitCode ends a command with a status and no further message.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// NewRoot builds the command tree writing to out and errOut.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "gpuaas",
		Short:         "Control plane of a GPU cloud's app platform",
		Version:       buildinfo.Read().Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("gpuaas {{.Version}}\n")
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(newVersionCmd(), newDevCmd(), newServerCmd(), newMigrateCmd(), newRegistryCmd(), newKeysCmd(), newAgentCmd())
	root.AddCommand(apiCommands()...)
	addOutputFlag(root)
	addRetriesFlag(root)
	requireKnownSubcommands(root)
	nameMissingArguments(root)
	root.SetFlagErrorFunc(suggestFlag)
	// Bare gpuaas is a usage error: it prints the help to stderr and exits 2.
	root.RunE = func(cmd *cobra.Command, args []string) error {
		cmd.SetOut(cmd.ErrOrStderr())
		_ = cmd.Help()
		return usageError{"no command given: run gpuaas COMMAND (the commands are listed above)"}
	}
	return root
}

func newVersionCmd() *cobra.Command {
	var asJSON, check bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the gpuaas version, commit and build date (--check: is a newer release published?)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if check {
				if asJSON {
					_ = cmd.Flag("output").Value.Set(outputJSON)
				}
				return checkVersion(cmd, versionOverride(cmd))
			}
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
	cmd.Flags().BoolVar(&check, "check", false, "ask the API whether a newer release than this build is published")
	cmd.Flags().String("compare-as", "", "with --check: compare this version instead of the build's own")
	_ = cmd.Flags().MarkHidden("compare-as")
	addClientFlags(cmd)
	return cmd
}
