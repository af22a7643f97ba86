package registry

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
)

// Defaults applied by Config.withDefaults.
const (
	DefaultIssuer   = "gpuaas"
	DefaultTokenTTL = 5 * time.Minute
	// MaxTokenTTL bounds Config.TokenTTL: registry tokens are meant to be short-lived.
	MaxTokenTTL = 24 * time.Hour
	// TokenPath is where Handler serves the Docker token endpoint.
	TokenPath = "/v2/token"
)

// Config configures the embedded registry (or the link to an external one)
// and its token endpoint.
type Config struct {
	// RootDir is the filesystem storage root of the embedded registry.
	// Required unless ExternalURL is set.
	RootDir string
	// Host is the externally visible host:port of the listener that mounts
	// Handler (the control plane's). It is the default Service (embedded
	// mode) and the default realm host.
	Host string
	// Realm is the absolute URL of the token endpoint that registry
	// challenges point clients to. Default "https://<Host>/v2/token".
	Realm string
	// Service is the token audience ("service" parameter). Default: Host in
	// embedded mode, the host:port of ExternalURL in external mode.
	Service string
	// Issuer is the "iss" of minted tokens. Default "gpuaas".
	Issuer string
	// TokenTTL is the lifetime of minted tokens. Default 5 minutes.
	TokenTTL time.Duration
	// ExternalURL, when set, selects external mode: no registry runs
	// in-process and the Client talks to this distribution-compatible
	// registry (e.g. "https://registry.example.com"), which must trust this
	// package's token issuer (see the package documentation).
	ExternalURL string
	// HTTPSecret signs upload state in the embedded registry. Replicas
	// sharing one RootDir behind a load balancer must share it; random
	// when empty.
	HTTPSecret string
	// Keys signs and verifies tokens. Nil generates an ephemeral Ed25519
	// key (tokens die with the process; fine for dev, not for replicas).
	Keys *KeySet
	// OnUnknownKey is called when the embedded registry is handed a token
	// naming a key its set lacks, before refusing it: it may reload the set
	// (Registry.SetKeys), throttling itself. Nil: nothing is called.
	OnUnknownKey func()
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// External reports whether the config selects an external registry.
func (c Config) External() bool { return c.ExternalURL != "" }

// withDefaults returns a copy with defaults filled in. It does not validate.
func (c Config) withDefaults() Config {
	if c.Issuer == "" {
		c.Issuer = DefaultIssuer
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = DefaultTokenTTL
	}
	if c.Realm == "" && c.Host != "" {
		c.Realm = "https://" + c.Host + TokenPath
	}
	if c.Service == "" {
		if c.External() {
			if u, err := url.Parse(c.ExternalURL); err == nil {
				c.Service = u.Host
			}
		} else {
			c.Service = c.Host
		}
	}
	c.Now = clock.Or(c.Now)
	return c
}

// Validate checks the config after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []string
	if c.Host == "" {
		errs = append(errs, "host is required")
	} else if strings.Contains(c.Host, "/") {
		errs = append(errs, fmt.Sprintf("host %q must be host[:port], without scheme or path", c.Host))
	} else if h, _, err := net.SplitHostPort(c.Host); err == nil && h == "" {
		errs = append(errs, fmt.Sprintf("host %q has an empty host name", c.Host))
	}
	if err := checkHTTPURL(c.Realm); err != nil {
		errs = append(errs, "realm: "+err.Error())
	}
	if c.External() {
		if err := checkHTTPURL(c.ExternalURL); err != nil {
			errs = append(errs, "external url: "+err.Error())
		}
	} else if c.RootDir == "" {
		errs = append(errs, "root dir is required for the embedded registry")
	}
	if c.Service == "" {
		errs = append(errs, "service is required")
	}
	if c.TokenTTL < 0 || c.TokenTTL > MaxTokenTTL {
		errs = append(errs, fmt.Sprintf("token ttl %s must be in (0, %s]", c.TokenTTL, MaxTokenTTL))
	}
	if len(errs) > 0 {
		return invalidf("registry_config_invalid", "registry config: %s", strings.Join(errs, "; "))
	}
	return nil
}

func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q must be an absolute http(s) URL", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", raw)
	}
	return nil
}
