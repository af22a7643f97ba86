package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agnivade/levenshtein"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// usageError is a wrong command line (nothing ran): an unknown command or
// flag, a missing or extra argument. Run exits with exitUsage on it.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

// nameMissingArguments makes every command's argument check say which
// arguments are missing (named as in its usage line, e.g. "missing APP
// VERSION") or which one is extra, instead of cobra's "accepts 2 arg(s),
// received 0"; the error is a usageError.
func nameMissingArguments(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		nameMissingArguments(c)
	}
	check := cmd.Args
	if check == nil {
		return
	}
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		err := check(cmd, args)
		var u usageError
		if err == nil || errors.As(err, &u) {
			return err
		}
		return usageError{argumentProblem(cmd, args, err)}
	}
}

// argumentProblem says what is wrong with args, given the positional
// arguments the usage line names.
func argumentProblem(cmd *cobra.Command, args []string, err error) string {
	names := positionalNames(cmd.Use)
	see := fmt.Sprintf(" (usage: %s; see %s --help)", cmd.UseLine(), cmd.CommandPath())
	switch {
	case len(args) < len(names):
		return "missing " + strings.Join(names[len(args):], " ") + see
	case len(args) > len(names):
		extra := args[len(names):]
		if len(names) == 0 {
			return fmt.Sprintf("%s takes no arguments, got %q%s", cmd.CommandPath(), strings.Join(extra, " "), see)
		}
		return fmt.Sprintf("unexpected argument %q after %s%s", strings.Join(extra, " "), strings.Join(names, " "), see)
	}
	return err.Error() + see
}

// positionalNames are the required positional arguments of a usage line
// ("get INSTANCE_ID --project ID" → INSTANCE_ID): the words after the verb
// up to the first flag or optional part.
func positionalNames(use string) []string {
	var names []string
	for _, w := range strings.Fields(use)[1:] {
		if strings.HasPrefix(w, "-") || strings.HasPrefix(w, "[") {
			break
		}
		names = append(names, w)
	}
	return names
}

// suggestFlag is the flag error of every command: an unknown flag names
// the closest known one ("did you mean --project?"); every flag error is a
// usageError pointing at the command's help.
func suggestFlag(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		// The closest name wins, a name that starts with what was typed
		// breaking ties (--gpu: --gpus, not --cpus).
		best, bestScore := "", 5 // at most two edits away
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden {
				return
			}
			score := 2 * levenshtein.ComputeDistance(name, f.Name)
			if strings.HasPrefix(f.Name, name) {
				score = min(score, 2) - 1
			}
			if score < bestScore {
				best, bestScore = f.Name, score
			}
		})
		if best != "" {
			msg += "; did you mean --" + best + "?"
		}
	}
	return usageError{fmt.Sprintf("%s (see %s --help)", msg, cmd.CommandPath())}
}
