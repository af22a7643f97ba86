package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/spf13/cobra"
)

func init() { commandFactories = append(commandFactories, newSACmd) }

func newSACmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sa",
		Short: "Service accounts: machine identities of a project and their short-lived tokens",
	}
	addClientFlags(cmd)
	projectFlag(cmd, true)
	cmd.AddCommand(newSACreateCmd(), newSAListCmd(), newSAGetCmd(),
		newSAStatusCmd("disable"), newSAStatusCmd("enable"),
		newSARotateCmd(), newSADeleteCmd(), newSATokenCmd())
	return cmd
}

func projectOf(cmd *cobra.Command) (string, error) {
	if p := flagOrEnv(cmd, "project", "GPUAAS_PROJECT_ID"); p != "" {
		return p, nil
	}
	return "", errors.New("name the project with --project or GPUAAS_PROJECT_ID")
}

// projectClient returns the project id (--project or GPUAAS_PROJECT_ID,
// an id or a slug) and the API client of a verb.
func projectClient(cmd *cobra.Command) (string, *client.Client, error) {
	project, err := projectOf(cmd)
	if err != nil {
		return "", nil, err
	}
	c, err := apiClient(cmd)
	if err != nil {
		return "", nil, err
	}
	project, err = resolveProject(cmd.Context(), c, project)
	return project, c, err
}

// saClient is projectClient plus the service account args[0] names (id or slug).
func saClient(cmd *cobra.Command, ref string) (project, id string, c *client.Client, err error) {
	if project, c, err = projectClient(cmd); err != nil {
		return "", "", nil, err
	}
	id, err = resolveServiceAccount(cmd.Context(), c, project, ref)
	return project, id, c, err
}

// keyOutput is how create and rotate-key hand over a new private key.
type keyOutput struct {
	keyFile, publicKeyFile, algorithm string
	print                             bool
}

func (o *keyOutput) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.keyFile, "key-file", "", "write the new key (ids + private key, JSON) to this new file, mode 0600")
	cmd.Flags().BoolVar(&o.print, "print-private-key", false, "print the private key to stdout instead (it is shown once)")
	cmd.Flags().StringVar(&o.publicKeyFile, "public-key-file", "", "use your own public key (PEM) instead of a server-generated pair")
	cmd.Flags().StringVar(&o.algorithm, "key-algorithm", "", "algorithm of a server-generated key: EdDSA (default) or ES256")
}

// check runs before the API call: a generated private key must have
// somewhere to go, since the server will not show it again.
func (o *keyOutput) check() (publicPEM string, err error) {
	if o.publicKeyFile != "" {
		// No private key comes back for your own public key: a --key-file
		// left unwritten would surface only when a later sa token fails.
		if o.keyFile != "" || o.print {
			return "", usageError{"--public-key-file brings your own key pair, so there is no private key to write or print: drop --key-file and --print-private-key (mint tokens from your private key with gpuaas sa token --key-file KEY.pem --service-account-id ID --key-id ID)"}
		}
		b, err := os.ReadFile(o.publicKeyFile)
		if err != nil {
			return "", err
		}
		return string(b), nil
	}
	if o.keyFile == "" && !o.print {
		return "", errors.New("the private key is shown once: pass --key-file FILE (recommended) or --print-private-key")
	}
	if o.keyFile != "" {
		if _, err := os.Stat(o.keyFile); err == nil {
			return "", fmt.Errorf("%s exists; pick a new --key-file (keys are never overwritten)", o.keyFile)
		}
	}
	return "", nil
}

// deliver writes or prints the issued key and prints the account.
func (o *keyOutput) deliver(cmd *cobra.Command, k client.IssuedServiceAccountKey) error {
	if k.PrivateKeyPEM != "" {
		kf := k.KeyFile()
		if o.keyFile != "" {
			if err := client.WriteKeyFile(o.keyFile, kf); err != nil {
				return fmt.Errorf("could not write the key file (the key is lost; rotate-key for a new one): %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Key %s written to %s (mode 0600). Use it with: gpuaas sa token --key-file %s\n", k.KeyID, o.keyFile, o.keyFile)
		} else {
			return printJSON(cmd, kf)
		}
	}
	if k.PrivateKeyPEM == "" {
		// The server gives a private key out once; an answer without one
		// is the stored repeat of a first answer that had it and was lost
		// on the way (the request was sent again).
		if err := printJSON(cmd, k); err != nil {
			return err
		}
		return fmt.Errorf("the answer carries no private key: the server gave key %s out once, in an answer that did not reach this command; run gpuaas sa rotate-key %s for a new one", k.KeyID, k.ID)
	}
	k.PrivateKeyPEM = ""
	return printJSON(cmd, k)
}

func newSACreateCmd() *cobra.Command {
	var (
		in  client.CreateServiceAccountRequest
		out keyOutput
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a service account and its first key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			project, c, err := projectClient(cmd)
			if err != nil {
				return err
			}
			if in.PublicKeyPEM, err = out.check(); err != nil {
				return err
			}
			in.KeyAlgorithm = out.algorithm
			k, err := c.CreateServiceAccount(cmd.Context(), project, in)
			if err != nil {
				return err
			}
			return out.deliver(cmd, k)
		},
	}
	cmd.Flags().StringVar(&in.Name, "name", "", "display name")
	cmd.Flags().StringVar(&in.Slug, "slug", "", "slug, unique in the project")
	cmd.Flags().StringVar(&in.Description, "description", "", "what the account is for")
	cmd.Flags().StringSliceVar(&in.Roles, "role", nil, "project role (repeatable; default app_operator)")
	out.flags(cmd)
	_ = cmd.MarkFlagRequired("name")
	_ = cmd.MarkFlagRequired("slug")
	return cmd
}

func newSAListCmd() *cobra.Command {
	var (
		limit  int
		cursor string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the service accounts of a project",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			project, c, err := projectClient(cmd)
			if err != nil {
				return err
			}
			l, err := c.ListServiceAccounts(cmd.Context(), project, limit, cursor)
			if err != nil {
				return err
			}
			return printResult(cmd, l, "id", "slug", "name", "status", "roles", "created_at")
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "page size (1-500)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "next_cursor of the previous page")
	return cmd
}

func newSAGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get SERVICE_ACCOUNT",
		Short: "Show one service account",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			project, id, c, err := saClient(cmd, args[0])
			if err != nil {
				return err
			}
			a, err := c.GetServiceAccount(cmd.Context(), project, id)
			if err != nil {
				return err
			}
			return printJSON(cmd, a)
		},
	}
}

func newSAStatusCmd(verb string) *cobra.Command {
	short := map[string]string{
		"disable": "Disable a service account; its live tokens fail on their next request",
		"enable":  "Enable a disabled service account",
	}[verb]
	return &cobra.Command{
		Use:   verb + " SERVICE_ACCOUNT",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			project, id, c, err := saClient(cmd, args[0])
			if err != nil {
				return err
			}
			f := c.DisableServiceAccount
			if verb == "enable" {
				f = c.EnableServiceAccount
			}
			a, err := f(cmd.Context(), project, id)
			if err != nil {
				return err
			}
			return printJSON(cmd, a)
		},
	}
}

func newSARotateCmd() *cobra.Command {
	var (
		grace time.Duration
		out   keyOutput
	)
	cmd := &cobra.Command{
		Use:   "rotate-key SERVICE_ACCOUNT",
		Short: "Add a new key; the current keys stay valid for --grace (0: revoked now)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			project, id, c, err := saClient(cmd, args[0])
			if err != nil {
				return err
			}
			in := client.RotateServiceAccountKeyRequest{GracePeriodSeconds: int(grace / time.Second), KeyAlgorithm: out.algorithm}
			if in.PublicKeyPEM, err = out.check(); err != nil {
				return err
			}
			k, err := c.RotateServiceAccountKey(cmd.Context(), project, id, in)
			if err != nil {
				return err
			}
			return out.deliver(cmd, k)
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 0, "how long the current keys stay valid (0 revokes them now; at most 168h)")
	out.flags(cmd)
	return cmd
}

func newSADeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete SERVICE_ACCOUNT",
		Short: "Delete a service account, its keys and role bindings",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			project, id, c, err := saClient(cmd, args[0])
			if err != nil {
				return err
			}
			if err := c.DeleteServiceAccount(cmd.Context(), project, id); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Deleted service account %s\n", args[0])
			return printResult(cmd, map[string]any{"id": id, "deleted": true})
		},
	}
}

func newSATokenCmd() *cobra.Command {
	var (
		keyFile, saID, keyID, profile string
		printToken, activate          bool
	)
	cmd := &cobra.Command{
		Use:   "token --key-file FILE",
		Short: "Sign an assertion locally with a service-account key and exchange it for a short-lived token",
		Long: `Reads a key file written by "gpuaas sa create/rotate-key --key-file" (or a PEM
private key with --service-account-id and --key-id), signs a one-time JWT
assertion locally — the private key never leaves this machine — and exchanges
it for an access token. The token is stored (mode 0600) in its own profile —
--profile, default the key file's name without extension (publisher.json:
"publisher") — beside a person's login, which stays active unless --activate
(or no profile is active yet). Act as it with --as NAME or GPUAAS_PROFILE=NAME.
--print prints the token instead (GPUAAS_TOKEN=$(gpuaas sa token --key-file F --print)).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kf, err := loadKey(keyFile, saID, keyID)
			if err != nil {
				return err
			}
			if profile == "" {
				profile = strings.TrimSuffix(filepath.Base(keyFile), filepath.Ext(keyFile))
			}
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			base, explicit := apiURL(cmd, cfg.Profiles[profile])
			if !explicit && kf.TokenURL != "" {
				base = strings.TrimSuffix(kf.TokenURL, client.ServiceAccountTokenPath)
			}
			c, err := cliClient(cmd, base, "")
			if err != nil {
				return err
			}
			t, err := c.ServiceAccountToken(cmd.Context(), kf)
			if err != nil {
				return err
			}
			if printToken {
				fmt.Fprintln(cmd.OutOrStdout(), t.AccessToken)
				return nil
			}
			// A JSON key file names its account and key: remember it so
			// an expired token is minted again (a bare PEM needs the ids).
			remember := ""
			if saID == "" && keyID == "" {
				if remember, err = filepath.Abs(keyFile); err != nil {
					return err
				}
			}
			path, err := cacheToken(profile, activate, c.BaseURL, "service_account:"+kf.ServiceAccountID, remember, t)
			if err != nil {
				return err
			}
			if cfg, err = loadConfig(); err != nil {
				return err
			}
			return printOutcome(cmd, fmt.Sprintf("Token for service account %s stored in profile %q in %s (valid %ds); act as it with --as %s or %s=%s. Active profile: %q",
				kf.ServiceAccountID, profile, path, t.ExpiresIn, profile, envProfile, profile, cfg.Active),
				viewOf(profile, cfg.Profiles[profile], cfg.Active == profile), profileColumns...)
		},
	}
	cmd.Flags().StringVar(&keyFile, "key-file", "", "key file (JSON from sa create/rotate-key) or a PEM private key")
	cmd.Flags().StringVar(&saID, "service-account-id", "", "service account id (overrides the key file's)")
	cmd.Flags().StringVar(&keyID, "key-id", "", "key id (overrides the key file's)")
	cmd.Flags().StringVar(&profile, "profile", "", "profile to store the token in (default: the key file's name without extension)")
	cmd.Flags().BoolVar(&activate, "activate", false, "make the profile the active one")
	cmd.Flags().BoolVar(&printToken, "print", false, "print the token to stdout instead of caching it")
	_ = cmd.MarkFlagRequired("key-file")
	return cmd
}

// loadKey reads a JSON key file or a bare PEM private key.
func loadKey(path, saID, keyID string) (client.KeyFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return client.KeyFile{}, err
	}
	var kf client.KeyFile
	if json.Valid(b) {
		if kf, err = client.ParseKeyFile(b); err != nil {
			return kf, fmt.Errorf("%s is %w", path, err)
		}
	} else {
		kf = client.KeyFile{Type: client.KeyFileType, PrivateKeyPEM: string(b)}
	}
	if saID != "" {
		kf.ServiceAccountID = saID
	}
	if keyID != "" {
		kf.KeyID = keyID
	}
	if kf.ServiceAccountID == "" || kf.KeyID == "" {
		return kf, errors.New("the key needs a service account id and key id: use a key file from sa create --key-file, or pass --service-account-id and --key-id")
	}
	if _, err := url.Parse(kf.TokenURL); err != nil {
		return kf, fmt.Errorf("the key file's token_url is not a URL: %w", err)
	}
	return kf, nil
}
