package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/buildinfo"
	"github.com/gpuaas/gpuaas/internal/fsutil"
	"github.com/spf13/cobra"
)

// How API nouns find the server and a token, first match wins:
//
//	profile: --as, GPUAAS_PROFILE, the config's active profile
//	API URL: --api-url, GPUAAS_API_URL, the profile's URL, http://127.0.0.1:8080
//	token:   --token, GPUAAS_TOKEN, the profile's token (if for that URL and unexpired)
//
// The config is <user config dir>/gpuaas/credentials.json (GPUAAS_CONFIG_DIR
// overrides the directory), mode 0600. It holds named profiles side by side,
// as gh auth and kubectl contexts do: `gpuaas login` writes a person's token
// to a profile and makes it active; `gpuaas sa token` writes a service
// account's token to its own profile and leaves the active one alone, so an
// admin command after it still runs as the person.
const (
	envAPIURL      = "GPUAAS_API_URL"
	envToken       = "GPUAAS_TOKEN"
	envConfigDir   = "GPUAAS_CONFIG_DIR"
	envProfile     = "GPUAAS_PROFILE"
	envRetries     = "GPUAAS_RETRIES"
	defaultAPIURL  = "http://127.0.0.1:8080"
	defaultProfile = "default"
)

// addClientFlags gives a noun command (and its verbs) --api-url, --token and --as.
func addClientFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().String("api-url", "", "API base URL (env "+envAPIURL+"; default: the profile's, else "+defaultAPIURL+")")
	cmd.PersistentFlags().String("token", "", "access token (env "+envToken+"; default: the profile's token)")
	cmd.PersistentFlags().String("as", "", "profile to act as (env "+envProfile+"; default: the active profile, see gpuaas auth status)")
}

// cachedCredentials is one profile: a token and who it belongs to.
type cachedCredentials struct {
	APIURL      string    `json:"api_url"`
	AccessToken string    `json:"access_token"`
	ExpiresAt   time.Time `json:"expires_at"`
	Principal   string    `json:"principal"` // user:<email> | service_account:<id>
	// KeyFile is the service-account key file the token was minted from
	// (gpuaas sa token): an expired token is minted again from it, as
	// cloud CLIs do with key files. Empty for a person's login.
	KeyFile string `json:"key_file,omitempty"`
}

// clientConfig is the whole config file: named profiles and the active one.
type clientConfig struct {
	Active   string                       `json:"active,omitempty"`
	Profiles map[string]cachedCredentials `json:"profiles"`
}

func credentialsPath() (string, error) {
	dir := os.Getenv(envConfigDir)
	if dir == "" {
		base, err := os.UserConfigDir()
		if err != nil {
			return "", fmt.Errorf("find the user config dir (set %s): %w", envConfigDir, err)
		}
		dir = filepath.Join(base, "gpuaas")
	}
	return filepath.Join(dir, "credentials.json"), nil
}

// loadConfig reads the config; a missing file is an empty config, and a
// file from before profiles (one token at the top level) becomes the
// profile "default".
func loadConfig() (clientConfig, error) {
	c := clientConfig{Profiles: map[string]cachedCredentials{}}
	p, err := credentialsPath()
	if err != nil {
		return c, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	var legacy cachedCredentials
	if json.Unmarshal(b, &c) != nil || json.Unmarshal(b, &legacy) != nil {
		return c, fmt.Errorf("%s is not a gpuaas credentials file; delete it and sign in again", p)
	}
	if c.Profiles == nil {
		c.Profiles = map[string]cachedCredentials{}
	}
	if legacy.AccessToken != "" && len(c.Profiles) == 0 {
		c.Profiles[defaultProfile], c.Active = legacy, defaultProfile
	}
	return c, nil
}

// profileName is the profile a command acts as: --as, GPUAAS_PROFILE, or
// the active one (empty when there is none).
func profileName(cmd *cobra.Command, c clientConfig) string {
	if p := flagOrEnv(cmd, "as", envProfile); p != "" {
		return p
	}
	return c.Active
}

// loadCredentials returns the profile the command acts as. A profile named
// explicitly (--as, GPUAAS_PROFILE) must exist.
func loadCredentials(cmd ...*cobra.Command) (cachedCredentials, error) {
	c, err := loadConfig()
	if err != nil {
		return cachedCredentials{}, err
	}
	var name string
	if len(cmd) > 0 {
		name = profileName(cmd[0], c)
	} else {
		name = c.Active
	}
	p, ok := c.Profiles[name]
	if !ok && name != "" && name != c.Active {
		return p, fmt.Errorf("no profile %q: run gpuaas auth status to list them, or gpuaas login --profile %s", name, name)
	}
	return p, nil
}

// saveConfig writes the config atomically, readable by its owner only.
func saveConfig(c clientConfig) (string, error) {
	p, err := credentialsPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	return p, fsutil.WriteFile(p, append(b, '\n'), 0o600)
}

func flagOrEnv(cmd *cobra.Command, flag, env string) string {
	if f := cmd.Flag(flag); f != nil && f.Value.String() != "" {
		return f.Value.String()
	}
	return os.Getenv(env)
}

// apiURL is the base URL the command talks to, and whether it was set
// explicitly (flag or env) rather than taken from the profile or the default.
func apiURL(cmd *cobra.Command, cache cachedCredentials) (string, bool) {
	if u := flagOrEnv(cmd, "api-url", envAPIURL); u != "" {
		return strings.TrimRight(u, "/"), true
	}
	if cache.APIURL != "" {
		return cache.APIURL, false
	}
	return defaultAPIURL, false
}

// apiClient builds the API client of a command from its flags, the
// environment and the profile it acts as.
func apiClient(cmd *cobra.Command) (*client.Client, error) {
	cache, err := loadCredentials(cmd)
	if err != nil {
		return nil, err
	}
	u, _ := apiURL(cmd, cache)
	c, err := cliClient(cmd, u, flagOrEnv(cmd, "token", envToken))
	if err != nil {
		return nil, err
	}
	if c.Token == "" && cache.AccessToken != "" && cache.APIURL == u {
		// A key-file profile mints a new token shortly before the old one
		// expires, so a long session never stops on an expired token.
		if cache.KeyFile != "" && time.Until(cache.ExpiresAt) < remintMargin {
			if cache, err = remint(cmd, cache); err != nil {
				return nil, err
			}
		}
		if time.Now().After(cache.ExpiresAt) {
			return nil, fmt.Errorf("the token of %s expired at %s: run gpuaas login (a person) or gpuaas sa token (a service account) again",
				cache.Principal, cache.ExpiresAt.Local().Format(time.RFC3339))
		}
		c.Token = cache.AccessToken
	}
	return c, nil
}

// remintMargin: a key-file profile's token this close to expiry is
// replaced before use, so it cannot expire in flight.
const remintMargin = 30 * time.Second

// remint mints a new token for the profile cmd acts as from the key file
// it was made from, stores it, and says so on stderr.
func remint(cmd *cobra.Command, cache cachedCredentials) (cachedCredentials, error) {
	cfg, err := loadConfig()
	if err != nil {
		return cache, err
	}
	name := profileName(cmd, cfg)
	kf, err := loadKey(cache.KeyFile, "", "")
	if err != nil {
		return cache, fmt.Errorf("the token of profile %q expired and its key file could not be read (%v): run gpuaas sa token --key-file FILE again", name, err)
	}
	c, err := cliClient(cmd, cache.APIURL, "")
	if err != nil {
		return cache, err
	}
	t, err := c.ServiceAccountToken(cmd.Context(), kf)
	if err != nil {
		return cache, fmt.Errorf("the token of profile %q expired; minting a new one from %s failed: %w", name, cache.KeyFile, err)
	}
	if _, err := cacheToken(name, false, cache.APIURL, cache.Principal, cache.KeyFile, t); err != nil {
		return cache, err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "The token of profile %q expired; minted a new one from %s (valid %ds).\n", name, cache.KeyFile, t.ExpiresIn)
	cache.AccessToken, cache.ExpiresAt = t.AccessToken, time.Now().Add(time.Duration(t.ExpiresIn)*time.Second)
	return cache, nil
}

// cliClient is the API client of cmd for baseURL, which must be an http or
// https URL with a host (a bare host:port would otherwise surface later as
// a URL-parse error from deep inside the HTTP client). It waits out the
// server's "not now" (429, a safe 503) as --retries allows, saying so on
// stderr each time, so a CI job does not fail on a moment's rate limit or
// a replica restarting.
func cliClient(cmd *cobra.Command, baseURL, token string) (*client.Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("API URL %q is not an http:// or https:// URL with a host; set --api-url or %s to e.g. %s", baseURL, envAPIURL, defaultAPIURL)
	}
	retries, err := retryCount(cmd)
	if err != nil {
		return nil, err
	}
	c := client.New(baseURL, token)
	c.UserAgent = "gpuaas-cli/" + buildinfo.Read().Version
	if retries > 0 {
		stderr := cmd.ErrOrStderr()
		c.Retry = &client.RetryPolicy{Retries: retries, MaxWait: maxRetryWait,
			OnRetry: func(n client.RetryNotice) { fmt.Fprintln(stderr, retryLine(n)) }}
	}
	return c, nil
}

const (
	// defaultRetries is how often a command sends a refused request again
	// unless --retries or GPUAAS_RETRIES says otherwise.
	defaultRetries = 3
	// maxRetryWait is the longest one wait: a command pauses at most
	// retries × maxRetryWait in all, and a server asking for longer (a
	// sign-in locked out for minutes) gets its refusal shown at once.
	maxRetryWait = 30 * time.Second
)

// addRetriesFlag gives cmd and every command under it --retries.
func addRetriesFlag(cmd *cobra.Command) {
	cmd.PersistentFlags().Int("retries", defaultRetries,
		"send a request the server refuses for now (429, or 503 where that is safe) again up to N times, each after the wait it asks (at most 30s); 0: never (env "+envRetries+")")
}

// retryCount is the --retries of cmd, else GPUAAS_RETRIES, else the
// default.
func retryCount(cmd *cobra.Command) (int, error) {
	if f := cmd.Flag("retries"); f != nil && f.Changed {
		n, err := strconv.Atoi(f.Value.String())
		if err != nil || n < 0 {
			return 0, usageError{fmt.Sprintf("--retries %s: give a number of retries, 0 to send nothing again", f.Value)}
		}
		return n, nil
	}
	v := os.Getenv(envRetries)
	if v == "" {
		return defaultRetries, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, usageError{fmt.Sprintf("%s=%q: give a number of retries, 0 to send nothing again", envRetries, v)}
	}
	return n, nil
}

// retryLine is what a person reads on stderr while a command waits to send
// a refused request again.
func retryLine(n client.RetryNotice) string {
	why := "the server is unavailable for now"
	if n.Refusal.Status == http.StatusTooManyRequests {
		why = "the server is rate limiting"
	}
	wait := n.Wait.Round(time.Second)
	if n.Wait < time.Second {
		wait = n.Wait.Round(time.Millisecond)
	}
	return fmt.Sprintf("gpuaas: %s (%d %s)%s%s (retry %d of %d)", why, n.Refusal.Status, n.Refusal.Code, retryLineMark, wait, n.Retry, n.Retries)
}

// retryLineMark is in every retryLine and in nothing else the CLI prints.
const retryLineMark = "; sending it again in "

// isRetryLine says whether line is a retryLine.
func isRetryLine(line string) bool {
	return strings.HasPrefix(line, "gpuaas: the server is ") && strings.Contains(line, retryLineMark)
}

// cacheToken stores a fresh token in profile (activating it when activate
// is set or no profile is active yet) and returns the config's path.
// keyFile is the service-account key file it was minted from ("" for a
// person's login).
func cacheToken(profile string, activate bool, baseURL, principal, keyFile string, t client.Token) (string, error) {
	c, err := loadConfig()
	if err != nil {
		return "", err
	}
	c.Profiles[profile] = cachedCredentials{APIURL: baseURL, AccessToken: t.AccessToken,
		ExpiresAt: time.Now().Add(time.Duration(t.ExpiresIn) * time.Second), Principal: principal, KeyFile: keyFile}
	if activate || c.Active == "" || c.Profiles[c.Active].AccessToken == "" {
		c.Active = profile
	}
	return saveConfig(c)
}
