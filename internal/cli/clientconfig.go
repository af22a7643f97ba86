package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/buildinfo"
	"github.com/spf13/cobra"
)

// How API nouns find the server and a token, first match wins:
//
//	API URL: --api-url, GPUAAS_API_URL, the cached credentials' URL, http://127.0.0.1:8080
//	token:   --token, GPUAAS_TOKEN, the cached token (if for that URL and unexpired)
//
// The cache is <user config dir>/gpuaas/credentials.json (GPUAAS_CONFIG_DIR
// overrides the directory), written mode 0600 by `gpuaas login` and
// `gpuaas sa token`.
const (
	envAPIURL     = "GPUAAS_API_URL"
	envToken      = "GPUAAS_TOKEN"
	envConfigDir  = "GPUAAS_CONFIG_DIR"
	defaultAPIURL = "http://127.0.0.1:8080"
)

// addClientFlags gives a noun command (and its verbs) --api-url and --token.
func addClientFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().String("api-url", "", "API base URL (env "+envAPIURL+"; default: the cached login's, else "+defaultAPIURL+")")
	cmd.PersistentFlags().String("token", "", "access token (env "+envToken+"; default: the token cached by gpuaas login or gpuaas sa token)")
}

// cachedCredentials is the token cache file.
type cachedCredentials struct {
	APIURL      string    `json:"api_url"`
	AccessToken string    `json:"access_token"`
	ExpiresAt   time.Time `json:"expires_at"`
	Principal   string    `json:"principal"` // user:<email> | service_account:<id>
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

// loadCredentials reads the cache; a missing file is an empty cache.
func loadCredentials() (cachedCredentials, error) {
	var c cachedCredentials
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
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s is not a gpuaas credentials file; delete it and sign in again", p)
	}
	return c, nil
}

// saveCredentials writes the cache atomically, readable by its owner only.
func saveCredentials(c cachedCredentials) (string, error) {
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
	f, err := os.CreateTemp(filepath.Dir(p), ".credentials-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return "", err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return p, os.Rename(f.Name(), p)
}

func flagOrEnv(cmd *cobra.Command, flag, env string) string {
	if f := cmd.Flag(flag); f != nil && f.Value.String() != "" {
		return f.Value.String()
	}
	return os.Getenv(env)
}

// apiURL is the base URL the command talks to, and whether it was set
// explicitly (flag or env) rather than taken from the cache or the default.
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
// environment and the token cache.
func apiClient(cmd *cobra.Command) (*client.Client, error) {
	cache, err := loadCredentials()
	if err != nil {
		return nil, err
	}
	u, _ := apiURL(cmd, cache)
	c := cliClient(u, flagOrEnv(cmd, "token", envToken))
	if c.Token == "" && cache.AccessToken != "" && cache.APIURL == u {
		if time.Now().After(cache.ExpiresAt) {
			return nil, fmt.Errorf("the cached token (%s) expired at %s; run gpuaas login or gpuaas sa token again",
				cache.Principal, cache.ExpiresAt.Local().Format(time.RFC3339))
		}
		c.Token = cache.AccessToken
	}
	return c, nil
}

// cliClient is the CLI's API client of baseURL.
func cliClient(baseURL, token string) *client.Client {
	c := client.New(baseURL, token)
	c.UserAgent = "gpuaas-cli/" + buildinfo.Read().Version
	return c
}

// cacheToken stores a fresh token for later commands.
func cacheToken(baseURL, principal string, t client.Token) (string, error) {
	return saveCredentials(cachedCredentials{APIURL: baseURL, AccessToken: t.AccessToken,
		ExpiresAt: time.Now().Add(time.Duration(t.ExpiresIn) * time.Second), Principal: principal})
}

// printJSON writes v to the command's output, indented.
func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
