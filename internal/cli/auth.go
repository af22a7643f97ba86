package cli

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func init() { commandFactories = append(commandFactories, newAuthCmd, newWhoamiCmd, newLogoutCmd) }

// profileColumns are the table columns of profiles.
var profileColumns = []string{"name", "active", "principal", "api_url", "expires_at", "expired"}

// viewOf is what a stored profile shows (never its token).
func viewOf(name string, p cachedCredentials, active bool) profileView {
	return profileView{Name: name, Active: active, Principal: p.Principal, APIURL: p.APIURL, ExpiresAt: p.ExpiresAt, Expired: time.Now().After(p.ExpiresAt)}
}

// profileView is one profile as auth status prints it (never the token).
type profileView struct {
	Name      string    `json:"name"`
	Active    bool      `json:"active"`
	Principal string    `json:"principal"`
	APIURL    string    `json:"api_url"`
	ExpiresAt time.Time `json:"expires_at"`
	Expired   bool      `json:"expired"`
}

func newAuthCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Profiles: who you are in each, which one is active (like gh auth, kubectl config)",
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "List the stored profiles: principal, API URL, expiry, and which one is active",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadConfig()
			if err != nil {
				return err
			}
			if len(c.Profiles) == 0 {
				return errors.New("not signed in: run gpuaas login (a person) or gpuaas sa token --key-file FILE (a service account)")
			}
			acting := profileName(cmd, c)
			names := make([]string, 0, len(c.Profiles))
			for n := range c.Profiles {
				names = append(names, n)
			}
			sort.Strings(names)
			views := make([]profileView, 0, len(names))
			for _, n := range names {
				views = append(views, viewOf(n, c.Profiles[n], n == acting))
			}
			return printResult(cmd, map[string]any{"active": acting, "items": views}, profileColumns...)
		},
	}
	use := &cobra.Command{
		Use:   "use PROFILE",
		Short: "Make PROFILE the active profile",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := loadConfig()
			if err != nil {
				return err
			}
			if _, ok := c.Profiles[args[0]]; !ok {
				return fmt.Errorf("no profile %q: run gpuaas auth status to list them", args[0])
			}
			c.Active = args[0]
			if _, err := saveConfig(c); err != nil {
				return err
			}
			p := c.Profiles[args[0]]
			return printOutcome(cmd, fmt.Sprintf("Active profile: %s (%s)", args[0], p.Principal), viewOf(args[0], p, true), profileColumns...)
		},
	}
	cmd.AddCommand(status, use, newLogoutCmd(), newWhoamiCmd())
	addClientFlags(cmd)
	return cmd
}

// newWhoamiCmd asks the server who the acting profile's token belongs to.
func newWhoamiCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Show who the acting profile is (asks the server), and the profile's name",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			me, err := c.Me(cmd.Context())
			if err != nil {
				return err
			}
			g, err := generic(me)
			if err != nil {
				return err
			}
			m, _ := g.(map[string]any)
			if m == nil {
				m = map[string]any{}
			}
			m["profile"] = profileName(cmd, cfg)
			m["api_url"] = c.BaseURL
			return printResult(cmd, m, "profile", "type", "id", "email", "org_id", "project_id", "api_url")
		},
	}
	addClientFlags(cmd)
	return cmd
}

// newLogoutCmd forgets a profile's token (the acting one, or --all).
func newLogoutCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "logout [PROFILE]",
		Short: "Forget a profile's token (default: the acting profile; --all: every profile)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := loadConfig()
			if err != nil {
				return err
			}
			var gone []string
			switch {
			case all:
				for n := range c.Profiles {
					gone = append(gone, n)
				}
			case len(args) == 1:
				gone = args
			default:
				gone = []string{profileName(cmd, c)}
			}
			sort.Strings(gone)
			for _, n := range gone {
				if _, ok := c.Profiles[n]; !ok && !all {
					return fmt.Errorf("no profile %q: run gpuaas auth status to list them", n)
				}
			}
			for _, n := range gone {
				delete(c.Profiles, n)
				if c.Active == n {
					c.Active = ""
				}
			}
			if _, err := saveConfig(c); err != nil {
				return err
			}
			return printOutcome(cmd, fmt.Sprintf("Logged out of %s", quoteAll(gone)),
				map[string]any{"logged_out": gone, "active": c.Active}, "logged_out", "active")
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "forget every profile")
	addClientFlags(cmd)
	return cmd
}

// quoteAll names profiles for a message: "a", "b".
func quoteAll(names []string) string {
	if len(names) == 0 {
		return "no profile"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return "profile " + strings.Join(q, ", ")
}
