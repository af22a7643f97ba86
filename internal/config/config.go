// Package config is the one configuration struct of gpuaas: defaults,
// flags with GPUAAS_* environment fallbacks, and validation.
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Config configures a control-plane process (dev or server).
type Config struct {
	Listen        string // host:port of the API (and the embedded registry)
	PublicURL     string // how clients reach the API; default http://<Listen>
	DatabaseURL   string // postgres://… or sqlite://PATH
	DataDir       string // embedded state: SQLite file, registry blobs, keys
	SecretKey     string // base64 master key sealing secrets at rest
	SecretKeyFile string // file holding SecretKey (created in dev mode)
	AutoMigrate   bool   // apply pending migrations at start

	LogLevel  string // debug | info | warn | error
	LogFormat string // json | text

	AccessTokenTTL         time.Duration // people's access tokens
	ServiceAccountTokenTTL time.Duration // auth.service_account_token_ttl_seconds
	IdempotencyTTL         time.Duration
	MaxBodyBytes           int64
	ShutdownTimeout        time.Duration

	// Server timeouts: a slow or idle client cannot hold a connection.
	ReadTimeout   time.Duration // whole request, headers and body
	WriteTimeout  time.Duration // from the end of the request headers to the end of the response
	IdleTimeout   time.Duration // keep-alive connection with no request
	StreamTimeout time.Duration // read/write deadline of streaming routes (blob uploads, registry)

	RegistryURL      string        // external distribution-compatible registry; empty = embedded
	RegistryDir      string        // embedded registry storage; default <data-dir>/registry
	BlobDir          string        // project blob storage; default <data-dir>/blobs
	RegistryTokenTTL time.Duration // lifetime of registry bearer tokens

	CredentialRate  float64 // sign-in/token requests per second per client address (0: no limit)
	CredentialBurst int
}

// Defaults returns the configuration used when nothing is set.
func Defaults() Config {
	return Config{
		Listen:                 "127.0.0.1:8080",
		DataDir:                "./.gpuaas",
		AutoMigrate:            true,
		LogLevel:               "info",
		LogFormat:              "json",
		AccessTokenTTL:         30 * time.Minute,
		ServiceAccountTokenTTL: 900 * time.Second,
		IdempotencyTTL:         24 * time.Hour,
		MaxBodyBytes:           1 << 20,
		ShutdownTimeout:        15 * time.Second,
		ReadTimeout:            30 * time.Second,
		WriteTimeout:           60 * time.Second,
		IdleTimeout:            120 * time.Second,
		StreamTimeout:          time.Hour,
		RegistryTokenTTL:       5 * time.Minute,
		CredentialRate:         5,
		CredentialBurst:        20,
	}
}

// Bind registers every setting as a flag on fs.
func (c *Config) Bind(fs *pflag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "host:port to serve the API and registry on")
	fs.StringVar(&c.PublicURL, "public-url", c.PublicURL, "base URL clients use to reach this server (default http://<listen>)")
	fs.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "postgres://… or sqlite://PATH")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for embedded state")
	fs.StringVar(&c.SecretKey, "secret-key", c.SecretKey, "base64 32-byte master key sealing secrets at rest (prefer GPUAAS_SECRET_KEY or --secret-key-file)")
	fs.StringVar(&c.SecretKeyFile, "secret-key-file", c.SecretKeyFile, "file holding the base64 master key")
	fs.BoolVar(&c.AutoMigrate, "auto-migrate", c.AutoMigrate, "apply pending database migrations at start")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "json or text")
	fs.DurationVar(&c.AccessTokenTTL, "access-token-ttl", c.AccessTokenTTL, "lifetime of people's access tokens")
	fs.DurationVar(&c.ServiceAccountTokenTTL, "service-account-token-ttl", c.ServiceAccountTokenTTL, "lifetime of service-account tokens (auth.service_account_token_ttl_seconds)")
	fs.DurationVar(&c.IdempotencyTTL, "idempotency-ttl", c.IdempotencyTTL, "how long idempotency keys are remembered")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest accepted JSON request body")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "grace period for in-flight requests on SIGTERM")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", c.ReadTimeout, "longest time to read one request, headers and body (streaming routes use --stream-timeout)")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", c.WriteTimeout, "longest time to write one response (streaming routes use --stream-timeout)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "how long an idle keep-alive connection stays open")
	fs.DurationVar(&c.StreamTimeout, "stream-timeout", c.StreamTimeout, "read/write deadline of streaming routes: blob uploads and downloads, the registry")
	fs.StringVar(&c.RegistryURL, "registry-url", c.RegistryURL, "external OCI registry trusting this server's tokens (default: embedded registry on the API listener)")
	fs.StringVar(&c.RegistryDir, "registry-dir", c.RegistryDir, "embedded registry storage (default <data-dir>/registry)")
	fs.StringVar(&c.BlobDir, "blob-dir", c.BlobDir, "project blob storage (default <data-dir>/blobs)")
	fs.Float64Var(&c.CredentialRate, "credential-rate", c.CredentialRate, "sign-in and token-exchange requests per second per client address (0 disables)")
	fs.IntVar(&c.CredentialBurst, "credential-burst", c.CredentialBurst, "burst allowed above --credential-rate")
	fs.DurationVar(&c.RegistryTokenTTL, "registry-token-ttl", c.RegistryTokenTTL, "lifetime of registry bearer tokens")
}

// ApplyEnv sets every flag not given on the command line from its
// GPUAAS_<FLAG_NAME> environment variable (e.g. --database-url ← GPUAAS_DATABASE_URL).
func ApplyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		name := "GPUAAS_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := lookup(name); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// Validate checks the configuration, filling derived defaults.
func (c *Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: want host:port", c.Listen))
	}
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("--database-url is required (postgres://… or sqlite://PATH)"))
	}
	if c.SecretKey == "" && c.SecretKeyFile == "" {
		errs = append(errs, errors.New("a master key is required: set GPUAAS_SECRET_KEY or --secret-key-file"))
	}
	if c.AccessTokenTTL < time.Minute || c.AccessTokenTTL > 12*time.Hour {
		errs = append(errs, errors.New("--access-token-ttl must be between 1m and 12h"))
	}
	if c.ServiceAccountTokenTTL < time.Minute || c.ServiceAccountTokenTTL > time.Hour {
		errs = append(errs, errors.New("--service-account-token-ttl must be between 1m and 1h"))
	}
	if c.IdempotencyTTL < time.Minute {
		errs = append(errs, errors.New("--idempotency-ttl must be at least 1m"))
	}
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, errors.New("--max-body-bytes must be at least 1024"))
	}
	for _, t := range []struct {
		name string
		v    time.Duration
	}{{"--read-timeout", c.ReadTimeout}, {"--write-timeout", c.WriteTimeout}, {"--idle-timeout", c.IdleTimeout}, {"--stream-timeout", c.StreamTimeout}} {
		if t.v < 100*time.Millisecond {
			errs = append(errs, fmt.Errorf("%s must be at least 100ms (a server without timeouts can be held open by a slow client)", t.name))
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel))
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, fmt.Errorf("--log-format %q: want json or text", c.LogFormat))
	}
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.Listen
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if c.DataDir != "" {
		abs, err := filepath.Abs(c.DataDir)
		if err == nil {
			c.DataDir = abs
		}
	}
	return errors.Join(errs...)
}
