package cli

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuaas/gpuaas/client"
)

// failure is a command whose call succeeded but whose outcome is a failure
// (a verification that ended "failed"): the result was printed, the process
// exits non-zero with the reason.
type failure struct{ msg string }

func (f failure) Error() string { return f.msg }

// describeError turns an error of cmd (the command that ran; nil if none
// did) into what a person reads: the API's message, the next step when
// there is an obvious one, and always the correlation id an admin looks
// the request up by.
func describeError(cmd *cobra.Command, err error) string {
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		msg := apiErr.Message
		if fields, _ := apiErr.Details["fields"].([]any); len(fields) > 0 && strings.HasPrefix(msg, "invalid request: ") {
			msg = "invalid request" // each field follows on its own line
		}
		switch {
		case apiErr.Status == 401 && apiErr.Code == "invalid_credentials":
			msg = "sign-in failed: " + msg
		case apiErr.Status == 401 && signsInWithProfile(cmd):
			msg = notSignedIn(cmd) + " — " + msg
		case apiErr.Status == 403:
			msg += " (check who you act as with gpuaas auth status; pick another profile with --as)"
		}
		s := fmt.Sprintf("%s\n  code: %s (HTTP %d)", msg, apiErr.Code, apiErr.Status)
		s += detailLines(apiErr.Details)
		if apiErr.CorrelationID != "" {
			s += "\n  correlation_id: " + apiErr.CorrelationID
		}
		return s
	}
	var uerr *url.Error
	var operr *net.OpError
	if errors.As(err, &uerr) && errors.As(err, &operr) {
		u, perr := url.Parse(uerr.URL)
		base := uerr.URL
		if perr == nil {
			base = u.Scheme + "://" + u.Host
		}
		return fmt.Sprintf("cannot reach the API at %s: is gpuaas dev running? (or set --api-url / GPUAAS_API_URL) — %v", base, operr.Err)
	}
	return err.Error()
}

// signsInWithProfile reports whether cmd acts with a profile's or a given
// token (the API nouns' client flags). Others, such as the node agent with
// its join token and node key, have credentials of their own: the server's
// message is their whole story, and sign-in advice would mislead.
func signsInWithProfile(cmd *cobra.Command) bool {
	return cmd == nil || cmd.Flag("token") != nil
}

// notSignedIn is the next step after a refused token, naming where the
// token came from: --token and GPUAAS_TOKEN override the profile's token,
// so signing in again does not help while one of them is set.
func notSignedIn(cmd *cobra.Command) string {
	if cmd != nil {
		if f := cmd.Flag("token"); f != nil && f.Value.String() != "" {
			return "the token given with --token was refused (it overrides the profile's token): pass a valid one, or drop --token to use the profile"
		}
		if f := cmd.Flag("token"); f != nil && os.Getenv(envToken) != "" {
			return "the token in " + envToken + " was refused (" + envToken + " overrides the profile's token): unset it to use the profile, or set a fresh token"
		}
	}
	return "not signed in (or the token expired): run gpuaas login, or gpuaas sa token --key-file FILE for a service account"
}

// detailLines prints the error details an app team acts on: the artifacts
// the publish gate expected and what is registered.
func detailLines(d map[string]any) string {
	arts, _ := d["artifacts"].([]any)
	var b strings.Builder
	// Field errors: the request field (a JSON pointer), why, and the code.
	fields, _ := d["fields"].([]any)
	for _, f := range fields {
		m, _ := f.(map[string]any)
		if m != nil {
			fmt.Fprintf(&b, "\n  %v: %v (%v)", m["field"], m["message"], m["code"])
		}
	}
	for _, a := range arts {
		m, _ := a.(map[string]any)
		if m == nil {
			continue
		}
		fmt.Fprintf(&b, "\n  artifact %v: expected", m["name"])
		if r, _ := m["expected_repository"].(string); r != "" {
			fmt.Fprintf(&b, " repository %s", r)
		}
		if dg, _ := m["expected_digest"].(string); dg != "" {
			fmt.Fprintf(&b, " digest %s", dg)
		}
		fmt.Fprint(&b, " active and verified;")
		regs, _ := m["registered"].([]any)
		if len(regs) == 0 {
			fmt.Fprint(&b, " nothing registered under this app, version and name (gpuaas artifact push --name NAME)")
		}
		for _, r := range regs {
			rm, _ := r.(map[string]any)
			fmt.Fprintf(&b, "\n    registered %v: state %v, trust %v, %v@%v", rm["id"], rm["lifecycle_state"], rm["trust_state"], rm["repository"], rm["digest"])
		}
		if why, _ := m["problem"].(string); why != "" {
			fmt.Fprintf(&b, "\n    problem: %s", why)
		}
	}
	return b.String()
}

// requireKnownSubcommands makes every command that only groups others
// refuse an unknown subcommand (exit 1, with suggestions) instead of
// printing help and exiting 0; without arguments it still prints help.
func requireKnownSubcommands(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		requireKnownSubcommands(c)
	}
	if !cmd.HasSubCommands() || cmd.Runnable() {
		return
	}
	cmd.SuggestionsMinimumDistance = 2
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return usageError{msg + " (run " + cmd.CommandPath() + " --help for its commands)"}
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
}
