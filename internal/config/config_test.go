package config

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestEnvFillsUnsetFlagsOnly(t *testing.T) {
	c := Defaults()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.Bind(fs)
	if err := fs.Parse([]string{"--listen", "127.0.0.1:9999"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"GPUAAS_LISTEN":                    "0.0.0.0:1",
		"GPUAAS_DATABASE_URL":              "sqlite:///tmp/x.db",
		"GPUAAS_SERVICE_ACCOUNT_TOKEN_TTL": "10m",
	}
	if err := ApplyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:9999" {
		t.Fatalf("flag lost to env: %s", c.Listen)
	}
	if c.DatabaseURL != "sqlite:///tmp/x.db" || c.ServiceAccountTokenTTL != 10*time.Minute {
		t.Fatalf("env not applied: %+v", c)
	}
}

func TestValidateNamesEveryProblem(t *testing.T) {
	c := Defaults()
	c.Listen = "nope"
	c.ServiceAccountTokenTTL = 2 * time.Hour
	c.LogFormat = "xml"
	c.WorkloadAPIURL = "172.17.0.1:8080" // no scheme
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"--listen", "--database-url", "master key", "--service-account-token-ttl", "--log-format", "--workload-api-url"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
	// An apps listener serves the apps domain's origins: without one set,
	// it has nothing to serve.
	c = Defaults()
	c.AppsListen = "127.0.0.1:8081"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--apps-listen needs --apps-domain") {
		t.Errorf("--apps-listen without --apps-domain: %v", err)
	}
	c.AppsDomain, c.AppsListen = "apps.example.com", "8081"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `--apps-listen "8081": want host:port`) {
		t.Errorf("--apps-listen without a host: %v", err)
	}
	// Values that parse but that no server can run with.
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.ShutdownTimeout = -time.Second }, "--shutdown-timeout -1s"},
		{func(c *Config) { c.RegistryTokenTTL = 0 }, "--registry-token-ttl 0s"},
		{func(c *Config) { c.RegistryTokenTTL = 2 * time.Hour }, "--registry-token-ttl 2h0m0s"},
		{func(c *Config) { c.PublicURL = "ftp://gpuaas.example.com" }, "want an http:// or https:// URL"},
		{func(c *Config) { c.PublicURL = "https://" }, "want a host"},
		{func(c *Config) { c.PublicURL = "https://admin:pw@gpuaas.example.com" }, "a user or password"},
		{func(c *Config) { c.PublicURL = "https://gpuaas.example.com/?x=1" }, "no query"},
		{func(c *Config) { c.PublicURL = "https://gpuaas.example.com/gpuaas" }, "want no path"},
		{func(c *Config) { c.RegistryURL = "registry.example.com" }, "--registry-url"},
		{func(c *Config) { c.AppsDomain, c.PublicURL = "apps.example.com", "https://console.Apps.example.com." }, "lies under --apps-domain apps.example.com"},
		{func(c *Config) { c.AppsDomain, c.PublicURL = "apps.example.com", "https://apps.example.com" }, "lies under --apps-domain"},
	} {
		c := Defaults()
		c.DatabaseURL, c.SecretKey = "sqlite://x.db", "k"
		tc.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error naming %q, got %v", tc.want, err)
		}
	}
	for _, ok := range []string{"", "http://127.0.0.1:8080", "https://gpuaas.example.com/", "https://[::1]:8443", "https://myapps.example.com"} {
		c := Defaults()
		c.DatabaseURL, c.SecretKey, c.PublicURL, c.RegistryURL = "sqlite://x.db", "k", ok, ok
		c.AppsDomain = "apps.example.com"
		if err := c.Validate(); err != nil {
			t.Errorf("--public-url and --registry-url %q refused: %v", ok, err)
		}
	}
	bad := Defaults()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	bad.Bind(fs)
	if err := ApplyEnv(fs, func(k string) (string, bool) { return "not-a-duration", k == "GPUAAS_ACCESS_TOKEN_TTL" }); err == nil {
		t.Fatal("a malformed env value must be refused")
	}
}

// The credential limiter's settings must let a sign-in through: a burst
// under 1 refuses every request, and NaN is no rate.
func TestValidateRefusesALimiterThatLocksEveryoneOut(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		burst int
		want  string
	}{
		{5, 0, "--credential-burst"}, {5, -1, "--credential-burst"},
		{math.NaN(), 20, "--credential-rate"}, {math.Inf(1), 20, "--credential-rate"}, {-1, 20, "--credential-rate"},
	} {
		c := Defaults()
		c.DatabaseURL, c.SecretKey = "sqlite:///tmp/x.db", "k"
		c.CredentialRate, c.CredentialBurst = tc.rate, tc.burst
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rate %v burst %d: %v, want an error naming %s", tc.rate, tc.burst, err, tc.want)
		}
	}
	c := Defaults()
	c.DatabaseURL, c.SecretKey = "sqlite:///tmp/x.db", "k"
	c.CredentialRate, c.CredentialBurst = 0, 0 // no limit: the burst is unused
	if err := c.Validate(); err != nil {
		t.Errorf("no limit: %v", err)
	}
}

// The usage and node request limits are validated like the credential
// one: a burst under 1 beside a rate refuses everything, and NaN, infinity
// or a negative number is no rate.
func TestValidateRefusesUsageAndNodeLimitsThatRefuseEverything(t *testing.T) {
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.UsageEventBurst = 0 }, "--usage-event-burst"},
		{func(c *Config) { c.UsageEventRate = math.NaN() }, "--usage-event-rate"},
		{func(c *Config) { c.UsageEventRate = -1 }, "--usage-event-rate"},
		{func(c *Config) { c.NodeRequestBurst = 0 }, "--node-request-burst"},
		{func(c *Config) { c.NodeRequestRate = math.Inf(1) }, "--node-request-rate"},
		{func(c *Config) { c.UnwrapBurst = 0 }, "--unwrap-burst"},
		{func(c *Config) { c.UnwrapRate = -2 }, "--unwrap-rate"},
	} {
		c := Defaults()
		c.DatabaseURL, c.SecretKey = "sqlite:///tmp/x.db", "k"
		tc.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want an error naming %s", err, tc.want)
		}
	}
	c := Defaults()
	c.DatabaseURL, c.SecretKey = "sqlite:///tmp/x.db", "k"
	c.UsageEventRate, c.UsageEventBurst, c.NodeRequestRate, c.NodeRequestBurst = 0, 0, 0, 0 // no limits
	c.UnwrapRate, c.UnwrapBurst = 0, 0
	if err := c.Validate(); err != nil {
		t.Errorf("no limits: %v", err)
	}
}

// gpuaas server warns at start about settings it accepts but production
// should not run with, and says nothing for a production-shaped config.
func TestProductionWarnings(t *testing.T) {
	c := Defaults()
	c.DatabaseURL, c.PublicURL = "sqlite:///var/lib/gpuaas/db", "http://gpuaas.internal:8080"
	w := strings.Join(c.ProductionWarnings(), "\n")
	for _, want := range []string{"SQLite", "--nats-url", "plain HTTP"} {
		if !strings.Contains(w, want) {
			t.Errorf("no warning naming %s:\n%s", want, w)
		}
	}
	c.DatabaseURL, c.PublicURL, c.Events.NATSURL = "postgres://db/gpuaas", "https://gpuaas.example.com", "nats://nats:4222"
	if w := c.ProductionWarnings(); len(w) != 0 {
		t.Errorf("a production config warned: %v", w)
	}
	for _, local := range []string{"http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080"} {
		c.PublicURL = local
		if w := c.ProductionWarnings(); len(w) != 0 {
			t.Errorf("%s warned: %v", local, w)
		}
	}
}

// Audit pruning is opt-in (0 keeps rows forever) and cannot be undone: a
// negative retention, or one under a day (a unit slip, as 720m for 720h),
// is refused with the flag named and what to set instead.
func TestValidateAuditRetention(t *testing.T) {
	for _, tc := range []struct {
		retention time.Duration
		want      string // "" accepted
	}{
		{0, ""},
		{24 * time.Hour, ""},
		{720 * time.Hour, ""},
		{-time.Hour, "--audit-retention -1h0m0s: must not be negative; set 0 to keep audit rows forever"},
		{720 * time.Minute, "--audit-retention 12h0m0s: want at least 24h, or 0 to keep audit rows forever; an audit trail shorter than a day is almost certainly a typo"},
		{24*time.Hour - time.Second, "--audit-retention 23h59m59s: want at least 24h"},
	} {
		c := Defaults()
		c.DatabaseURL, c.SecretKey = "sqlite:///tmp/x.db", "k"
		c.AuditRetention = tc.retention
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("--audit-retention %s refused: %v", tc.retention, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("--audit-retention %s: %v, want an error containing %q", tc.retention, err, tc.want)
		}
	}
	if Defaults().AuditRetention != 0 {
		t.Errorf("the default audit retention is %s, want 0 (keep forever)", Defaults().AuditRetention)
	}
	// The flag and its environment variable set it.
	c := Defaults()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.Bind(fs)
	if err := ApplyEnv(fs, func(k string) (string, bool) { return "2160h", k == "GPUAAS_AUDIT_RETENTION" }); err != nil || c.AuditRetention != 90*24*time.Hour {
		t.Errorf("GPUAAS_AUDIT_RETENTION=2160h: %s %v", c.AuditRetention, err)
	}
}
