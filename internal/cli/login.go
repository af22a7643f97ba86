package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func init() { commandFactories = append(commandFactories, newLoginCmd) }

// newLoginCmd signs a person in and caches the token. Automation uses
// service accounts (gpuaas sa token), never a person's token.
func newLoginCmd() *cobra.Command {
	var (
		email, profile string
		passwordStdin  bool
	)
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Sign in as a person and cache the access token",
		Long: `Signs in with email and password and caches the access token (mode 0600)
for later commands. The email comes from --email, GPUAAS_EMAIL or a prompt;
the password from --password-stdin (first line of stdin), GPUAAS_PASSWORD or
a prompt. The token goes to --profile (default "default"), which becomes the
active profile. Automation should use a service account (gpuaas sa token) instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := bufio.NewReader(cmd.InOrStdin())
			if email == "" {
				email = os.Getenv("GPUAAS_EMAIL")
			}
			if email == "" {
				fmt.Fprint(cmd.ErrOrStderr(), "Email: ")
				var err error
				if email, err = readLine(in); err != nil {
					return err
				}
			}
			password := os.Getenv("GPUAAS_PASSWORD")
			if passwordStdin || password == "" {
				var err error
				if password, err = readPassword(cmd, in, !passwordStdin); err != nil {
					return err
				}
			}
			if email == "" || password == "" {
				return errors.New("email and password are required")
			}
			// No bearer token: an expired cached one must not stop a new sign-in.
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			base, _ := apiURL(cmd, cfg.Profiles[profile])
			c, err := cliClient(cmd, base, "")
			if err != nil {
				return err
			}
			t, err := c.Login(cmd.Context(), email, password)
			if err != nil {
				return err
			}
			path, err := cacheToken(profile, true, c.BaseURL, "user:"+email, "", t)
			if err != nil {
				return fmt.Errorf("signed in, but could not cache the token: %w", err)
			}
			if cfg, err = loadConfig(); err != nil {
				return err
			}
			return printOutcome(cmd, fmt.Sprintf("Signed in to %s as %s; profile %q (active) in %s (valid %ds)", c.BaseURL, email, profile, path, t.ExpiresIn),
				viewOf(profile, cfg.Profiles[profile], true), profileColumns...)
		},
	}
	addClientFlags(cmd)
	cmd.Flags().StringVar(&email, "email", "", "email to sign in with (env GPUAAS_EMAIL)")
	cmd.Flags().StringVar(&profile, "profile", defaultProfile, "profile to store the token in; it becomes the active one")
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password from the first line of stdin")
	return cmd
}

func readLine(r *bufio.Reader) (string, error) {
	s, err := r.ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && s != "") {
		return "", fmt.Errorf("read from stdin: %w", err)
	}
	return strings.TrimRight(s, "\r\n"), nil
}

// readPassword reads a password: from a terminal without echo when prompt
// is set and stdin is one, else the first line of in.
func readPassword(cmd *cobra.Command, in *bufio.Reader, prompt bool) (string, error) {
	if !prompt {
		return readLine(in)
	}
	fmt.Fprint(cmd.ErrOrStderr(), "Password: ")
	if f, ok := cmd.InOrStdin().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		return string(b), err
	}
	return readLine(in)
}
