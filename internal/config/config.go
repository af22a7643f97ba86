// Package config is the one configuration struct of gpuaas: defaults,
// flags with GPUAAS_* environment fallbacks, and validation.
package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Config configures a control-plane process (dev or server).
type Config struct {
	Listen    string // host:port of the API (and the embedded registry)
	PublicURL string // how clients reach the API; default http://<Listen>
	// WorkloadAPIURL is how app instances on the nodes reach the API (their
	// GPUAAS_API_BASE_URL); default PublicURL. `gpuaas dev` sets it to a
	// listener on the Docker bridge when the API listens on loopback,
	// which a container cannot reach.
	WorkloadAPIURL string
	AddrFile       string // once serving, write http://<bound host:port> here (for --listen with port 0)
	DatabaseURL    string // postgres://… or sqlite://PATH
	DataDir        string // embedded state: SQLite file, registry blobs, keys
	SecretKey      string // base64 master key sealing secrets at rest
	SecretKeyFile  string // file holding SecretKey (created in dev mode)
	AutoMigrate    bool   // apply pending migrations at start

	LogLevel  string // debug | info | warn | error
	LogFormat string // json | text

	AccessTokenTTL         time.Duration // people's access tokens
	ServiceAccountTokenTTL time.Duration // auth.service_account_token_ttl_seconds
	IdempotencyTTL         time.Duration
	AuditRetention         time.Duration // how long audit rows are kept before internal/audit deletes them (0: forever)
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
	MaxBlobBytes     int64         // largest project blob object
	ProjectBlobQuota int64         // bytes of blob storage per project (artifacts, unregistered and in-progress uploads); 0 = no quota
	// RegistryQuota is the bytes of distinct blobs each project may hold in
	// the embedded registry, pushes in progress included; 0 = no quota.
	// MaxRegistryBlob is the largest single blob a push may upload there.
	RegistryQuota   int64
	MaxRegistryBlob int64

	CredentialRate  float64 // sign-in/token requests per second per client address (0: no limit)
	CredentialBurst int

	// RuntimeEventRate and RuntimeEventBurst bound the runtime events one
	// app instance may report to one replica (events per second, and at
	// once; a rate of 0: no limit). RuntimeEventRetention is how many
	// timeline rows recorded from runtime events one instance keeps (0:
	// every row).
	RuntimeEventRate      float64
	RuntimeEventBurst     int
	RuntimeEventRetention int

	// UsageEventRate and UsageEventBurst bound the usage events one app
	// instance may report to one replica; NodeRequestRate and
	// NodeRequestBurst the requests one node may make to each of its
	// endpoints (heartbeat, task poll, task result). A rate of 0: no limit.
	UsageEventRate   float64
	UsageEventBurst  int
	NodeRequestRate  float64
	NodeRequestBurst int
	// UnwrapRate and UnwrapBurst bound the registry-credential unwraps one
	// principal (a person, a service account, a node) may make on one
	// replica. A rate of 0: no limit.
	UnwrapRate  float64
	UnwrapBurst int

	NodeHeartbeatTTL   time.Duration // a node missing beats this long (+ grace) is down
	NodeHeartbeatGrace time.Duration
	NodeTokenTTL       time.Duration // lifetime of node access tokens
	NodeTaskLease      time.Duration // a delivered task without a result is delivered again after this

	// InstanceDeployTimeout, when set, bounds how long a deploy waits for
	// the workload to become ready (0: the version's readiness probe budget).
	InstanceDeployTimeout time.Duration
	// InstanceDriveInterval is how often each replica's instance driver
	// looks for work when no wake-up announced any: a fallback, since
	// every change that lets an operation move wakes the drivers of all
	// replicas at once.
	InstanceDriveInterval time.Duration
	// SchemaCheckInterval is how often each replica compares the
	// database's schema version with its own; while they differ it
	// pauses its background jobs and refuses changes.
	SchemaCheckInterval time.Duration
	// WorkerOperationTimeout bounds an external worker's operation;
	// WorkerLease is how long one acquisition or heartbeat holds it.
	WorkerOperationTimeout time.Duration
	WorkerLease            time.Duration

	// Billing (issue 13).
	BillingCurrency      string        // the one currency of prices, budgets and the ledger
	BillingMaxEventAge   time.Duration // how late an app usage event may arrive
	BillingSlice         time.Duration // long intervals are recorded slice by slice
	BillingMeterInterval time.Duration // how often intervals are metered and usage rated

	Events Events // the event bus, relay and streams (docs/events.md)

	// Web console and UI gateway (docs/console.md).
	AppsDomain         string        // instance UIs at <id>.<AppsDomain>; empty turns the gateway off
	AppsPathMode       bool          // also serve UIs at /apps/instances/<id>/ui/ on the console's origin
	AppsListen         string        // host:port of the apps listener (app origins on the gateway's own engine); empty: none
	AppTokenTTL        time.Duration // gateway app token lifetime: how long a revoked role keeps app access at most
	ConsoleIdleTimeout time.Duration // a console session unused this long ends
	ConsoleMaxAge      time.Duration // every console session ends this long after sign-in

	// Now is the one clock every service of the server reads (no flag:
	// nil is the wall clock; tests set a clock.Manual's Now to move time).
	Now func() time.Time
}

// Events configures NATS, the outbox relay and the event streams.
type Events struct {
	NATSURL       string // external NATS (nats://…); empty embeds a server under the data dir
	NATSCredsFile string // external NATS: .creds file
	NATSNKeyFile  string // external NATS: nkey seed file
	NATSListen    string // embedded NATS: loopback host:port for the nats CLI (empty: in-process only)
	NATSSync      string // embedded NATS fsync policy: "" (default), "always", or a duration

	Stream          string        // JetStream stream name
	DuplicateWindow time.Duration // JetStream duplicate window (dedupe by event id)
	StreamMaxAge    time.Duration // how long JetStream keeps events (0: forever)
	Retention       time.Duration // how long the outbox keeps published events (resume + republish)
	RelayInterval   time.Duration // relay poll period (it is also woken by every commit)
	LeaseTTL        time.Duration // relay lease; a crashed leader is replaced after this
	KeepAlive       time.Duration // SSE keep-alive comment period
	WriteTimeout    time.Duration // SSE: a client that does not drain for this long is disconnected
	Reauthorize     time.Duration // how often an open stream re-checks its reader's access
	// WebSocketOrigins are the Origin host patterns (path.Match, e.g.
	// console.example.com or https://*.example.com) allowed to open event
	// WebSockets besides the server's own host.
	WebSocketOrigins []string
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
		MaxBlobBytes:           64 << 30,
		MaxRegistryBlob:        64 << 30,
		CredentialRate:         5,
		CredentialBurst:        20,
		RuntimeEventRate:       10,     // instances.DefaultRuntimeEventRate
		RuntimeEventBurst:      2000,   // instances.DefaultRuntimeEventBurst: two full batches
		RuntimeEventRetention:  10_000, // instances.DefaultRuntimeEventRetention
		UsageEventRate:         100,    // billing.DefaultUsageEventRate
		UsageEventBurst:        20_000, // billing.DefaultUsageEventBurst: two full batches
		NodeRequestRate:        20,     // nodes.DefaultNodeRequestRate
		NodeRequestBurst:       200,    // nodes.DefaultNodeRequestBurst
		UnwrapRate:             2,      // artifacts.DefaultUnwrapRate
		UnwrapBurst:            60,     // artifacts.DefaultUnwrapBurst
		BillingCurrency:        "USD",
		BillingMaxEventAge:     72 * time.Hour,
		BillingSlice:           time.Hour,
		BillingMeterInterval:   time.Minute,
		NodeHeartbeatTTL:       10 * time.Second,
		NodeHeartbeatGrace:     5 * time.Second,
		NodeTokenTTL:           15 * time.Minute,
		NodeTaskLease:          2 * time.Minute,
		InstanceDriveInterval:  5 * time.Second,
		SchemaCheckInterval:    10 * time.Second,
		WorkerOperationTimeout: time.Hour,
		WorkerLease:            time.Minute,
		AppTokenTTL:            5 * time.Minute,
		ConsoleIdleTimeout:     30 * time.Minute,
		ConsoleMaxAge:          12 * time.Hour,
		Events: Events{
			Stream: "GPUAAS_EVENTS", DuplicateWindow: 10 * time.Minute, StreamMaxAge: 7 * 24 * time.Hour,
			Retention: 7 * 24 * time.Hour, RelayInterval: time.Second, LeaseTTL: 10 * time.Second,
			KeepAlive: 15 * time.Second, WriteTimeout: 30 * time.Second, Reauthorize: 2 * time.Second,
		},
	}
}

// Bind registers every setting as a flag on fs.
func (c *Config) Bind(fs *pflag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "host:port to serve the API and registry on")
	fs.StringVar(&c.PublicURL, "public-url", c.PublicURL, "base URL clients use to reach this server (default http://<listen>)")
	fs.StringVar(&c.WorkloadAPIURL, "workload-api-url", c.WorkloadAPIURL, "base URL app instances on the nodes use to reach this server (default --public-url; gpuaas dev picks the Docker bridge when --listen is loopback)")
	fs.StringVar(&c.AddrFile, "addr-file", c.AddrFile, "once serving, write the bound API URL (http://host:port) to this file, removed at shutdown; with --listen 127.0.0.1:0 it tells a supervisor or script the port picked")
	fs.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "postgres://… or sqlite://PATH")
	fs.StringVar(&c.SecretKey, "secret-key", c.SecretKey, "base64 32-byte master key sealing secrets at rest (prefer GPUAAS_SECRET_KEY or --secret-key-file)")
	fs.StringVar(&c.SecretKeyFile, "secret-key-file", c.SecretKeyFile, "file holding the base64 master key")
	fs.BoolVar(&c.AutoMigrate, "auto-migrate", c.AutoMigrate, "apply pending database migrations at start")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "json or text")
	fs.DurationVar(&c.AccessTokenTTL, "access-token-ttl", c.AccessTokenTTL, "lifetime of people's access tokens")
	fs.DurationVar(&c.ServiceAccountTokenTTL, "service-account-token-ttl", c.ServiceAccountTokenTTL, "lifetime of service-account tokens (auth.service_account_token_ttl_seconds)")
	fs.DurationVar(&c.IdempotencyTTL, "idempotency-ttl", c.IdempotencyTTL, "how long idempotency keys are remembered")
	fs.DurationVar(&c.AuditRetention, "audit-retention", c.AuditRetention, "how long audit rows are kept before they are deleted (0 keeps them forever; at least 24h otherwise)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest accepted JSON request body")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "grace period for in-flight requests on SIGTERM")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", c.ReadTimeout, "longest time to read one request, headers and body (streaming routes use --stream-timeout)")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", c.WriteTimeout, "longest time to write one response (streaming routes use --stream-timeout)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "how long an idle keep-alive connection stays open")
	fs.DurationVar(&c.StreamTimeout, "stream-timeout", c.StreamTimeout, "read/write deadline of streaming routes: blob uploads and downloads, the registry")
	c.BindRegistryStorage(fs)
	fs.StringVar(&c.BlobDir, "blob-dir", c.BlobDir, "project blob storage (default <data-dir>/blobs)")
	fs.Float64Var(&c.CredentialRate, "credential-rate", c.CredentialRate, "sign-in and token-exchange requests per second per client address (0 disables)")
	fs.IntVar(&c.CredentialBurst, "credential-burst", c.CredentialBurst, "burst allowed above --credential-rate")
	fs.Float64Var(&c.RuntimeEventRate, "runtime-event-rate", c.RuntimeEventRate, "runtime events per second one app instance may report to each replica, a batch counting each of its events (0 disables)")
	fs.IntVar(&c.RuntimeEventBurst, "runtime-event-burst", c.RuntimeEventBurst, "runtime events one app instance may report at once above --runtime-event-rate (a batch larger than this is refused)")
	fs.Float64Var(&c.UsageEventRate, "usage-event-rate", c.UsageEventRate, "usage events per second one app instance may report to each replica, a batch counting each of its events (0 disables)")
	fs.IntVar(&c.UsageEventBurst, "usage-event-burst", c.UsageEventBurst, "usage events one app instance may report at once above --usage-event-rate (a batch larger than this is refused)")
	fs.Float64Var(&c.NodeRequestRate, "node-request-rate", c.NodeRequestRate, "requests per second one node may make to each replica on each of its heartbeat, task-poll and task-result endpoints (0 disables)")
	fs.IntVar(&c.NodeRequestBurst, "node-request-burst", c.NodeRequestBurst, "requests one node may make at once to one of its endpoints above --node-request-rate")
	fs.Float64Var(&c.UnwrapRate, "unwrap-rate", c.UnwrapRate, "registry-credential unwraps per second one principal (person, service account, node) may make to each replica (0 disables)")
	fs.IntVar(&c.UnwrapBurst, "unwrap-burst", c.UnwrapBurst, "registry-credential unwraps one principal may make at once above --unwrap-rate")
	fs.IntVar(&c.RuntimeEventRetention, "runtime-event-retention", c.RuntimeEventRetention, "timeline rows recorded from runtime events that one app instance keeps; older ones are deleted (0 keeps every row)")
	fs.Int64Var(&c.MaxBlobBytes, "max-blob-bytes", c.MaxBlobBytes, "largest project blob object in bytes (uploads past it are refused and purged)")
	fs.Int64Var(&c.ProjectBlobQuota, "project-blob-quota-bytes", c.ProjectBlobQuota, "bytes of blob storage each project may hold: registered blob artifacts, committed uploads not registered and uploads in progress (0: no quota)")
	fs.Int64Var(&c.RegistryQuota, "project-registry-quota-bytes", c.RegistryQuota, "bytes of distinct image blobs each project may hold in the embedded registry, pushes in progress included (0: no quota)")
	fs.Int64Var(&c.MaxRegistryBlob, "max-registry-blob-bytes", c.MaxRegistryBlob, "largest single blob (image layer) a push to the embedded registry may upload, in bytes")
	fs.DurationVar(&c.RegistryTokenTTL, "registry-token-ttl", c.RegistryTokenTTL, "lifetime of registry bearer tokens")
	fs.StringVar(&c.BillingCurrency, "billing-currency", c.BillingCurrency, "ISO 4217 code of the currency of prices, budgets and the ledger")
	fs.DurationVar(&c.BillingMaxEventAge, "billing-max-event-age", c.BillingMaxEventAge, "how late an app usage event may arrive and still be accepted")
	fs.DurationVar(&c.BillingSlice, "billing-slice", c.BillingSlice, "length of the slices open allocation and session intervals are recorded in")
	fs.DurationVar(&c.BillingMeterInterval, "billing-meter-interval", c.BillingMeterInterval, "how often intervals are metered and usage is rated")
	fs.DurationVar(&c.NodeHeartbeatTTL, "node-heartbeat-ttl", c.NodeHeartbeatTTL, "a node whose last heartbeat is older than this plus the grace is marked down; agents beat every TTL/3")
	fs.DurationVar(&c.NodeHeartbeatGrace, "node-heartbeat-grace", c.NodeHeartbeatGrace, "extra time past the heartbeat TTL before a node is marked down")
	fs.DurationVar(&c.NodeTokenTTL, "node-token-ttl", c.NodeTokenTTL, "lifetime of node access tokens")
	fs.DurationVar(&c.NodeTaskLease, "node-task-lease", c.NodeTaskLease, "how long a delivered task waits for its result before it is delivered again")
	fs.DurationVar(&c.InstanceDeployTimeout, "instance-deploy-timeout", c.InstanceDeployTimeout, "how long a deploy waits for an app instance to become ready (0: the version's readiness probe budget)")
	fs.DurationVar(&c.WorkerOperationTimeout, "worker-operation-timeout", c.WorkerOperationTimeout, "the longest an external worker's operation may take; past it the operation fails with operation_timeout and a cleanup operation follows")
	fs.DurationVar(&c.WorkerLease, "worker-lease", c.WorkerLease, "how long an external worker's acquire or heartbeat holds its operation; an expired lease makes the operation available to any worker of the app")
	fs.DurationVar(&c.InstanceDriveInterval, "instance-drive-interval", c.InstanceDriveInterval, "how often each replica's instance driver looks for work that no wake-up announced (a fallback: queued operations and task results wake every replica's driver at once)")
	fs.DurationVar(&c.SchemaCheckInterval, "schema-check-interval", c.SchemaCheckInterval, "how often each replica compares the database's schema version with its own; while they differ (an old replica beside a migrated schema) it pauses its background jobs and answers changes with 503 schema_mismatch")
	e := &c.Events
	fs.StringVar(&c.AppsDomain, "apps-domain", c.AppsDomain, "UI gateway: serve each instance's UI at <instance-id>.<apps-domain> (needs wildcard DNS to this server; gpuaas dev uses apps.localhost); empty turns the gateway off")
	fs.StringVar(&c.AppsListen, "apps-listen", c.AppsListen, "UI gateway: also serve app origins on this host:port, proxied by the gateway's own engine (faster than the console's listener; route *.<apps-domain> here; gpuaas dev listens on a free port of --listen's host)")
	fs.BoolVar(&c.AppsPathMode, "apps-path-mode", c.AppsPathMode, "UI gateway: also serve UIs at /apps/instances/<id>/ui/ on the console's own origin (apps then share its origin; see docs/console.md)")
	fs.DurationVar(&c.AppTokenTTL, "app-token-ttl", c.AppTokenTTL, "UI gateway: lifetime of the app token cookie, the longest a revoked role keeps access to an app's UI")
	fs.DurationVar(&c.ConsoleIdleTimeout, "console-idle-timeout", c.ConsoleIdleTimeout, "web console: a session nobody used for this long ends")
	fs.DurationVar(&c.ConsoleMaxAge, "console-max-age", c.ConsoleMaxAge, "web console: every session ends this long after sign-in")
	fs.StringVar(&e.NATSURL, "nats-url", e.NATSURL, "external NATS JetStream servers (nats://host:4222,…); empty embeds NATS under the data dir")
	fs.StringVar(&e.NATSCredsFile, "nats-creds", e.NATSCredsFile, "external NATS: credentials (.creds) file")
	fs.StringVar(&e.NATSNKeyFile, "nats-nkey", e.NATSNKeyFile, "external NATS: nkey seed file")
	fs.StringVar(&e.NATSListen, "nats-listen", e.NATSListen, "embedded NATS: also listen on this host:port for the nats CLI (password in <data-dir>/nats.password)")
	fs.StringVar(&e.NATSSync, "nats-sync", e.NATSSync, "embedded NATS fsync policy: empty (NATS default, every 2m), always, or a duration")
	fs.StringVar(&e.Stream, "events-stream", e.Stream, "JetStream stream the relay publishes events to")
	fs.DurationVar(&e.DuplicateWindow, "events-duplicate-window", e.DuplicateWindow, "JetStream duplicate window (events republished within it are dropped by id)")
	fs.DurationVar(&e.StreamMaxAge, "events-stream-max-age", e.StreamMaxAge, "how long JetStream keeps events (0 keeps them forever)")
	fs.DurationVar(&e.Retention, "events-retention", e.Retention, "how long the outbox keeps published events for resumable streams and republishing")
	fs.DurationVar(&e.RelayInterval, "events-relay-interval", e.RelayInterval, "relay poll period (commits also wake it at once)")
	fs.DurationVar(&e.LeaseTTL, "events-lease-ttl", e.LeaseTTL, "relay lease lifetime: a crashed relay's successor takes over after this")
	fs.DurationVar(&e.KeepAlive, "events-keepalive", e.KeepAlive, "period of keep-alive comments on idle event streams")
	fs.DurationVar(&e.WriteTimeout, "events-write-timeout", e.WriteTimeout, "an event-stream client that does not drain its connection for this long is disconnected")
	fs.DurationVar(&e.Reauthorize, "events-reauth-interval", e.Reauthorize, "how often an open event stream re-checks that its reader still has access (token, account, role); at most 5s")
	fs.StringSliceVar(&e.WebSocketOrigins, "events-websocket-origins", e.WebSocketOrigins, "Origin host patterns (besides this server's host) allowed to open event WebSockets, e.g. console.example.com")
}

// BindRegistryStorage registers the flags that say where the registry's
// content lives (--data-dir, --registry-dir, --registry-url): the server's
// own, which `gpuaas registry gc` shares so that both find one directory
// from one command line or environment.
func (c *Config) BindRegistryStorage(fs *pflag.FlagSet) {
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for embedded state")
	fs.StringVar(&c.RegistryURL, "registry-url", c.RegistryURL, "external OCI registry trusting this server's tokens (default: embedded registry on the API listener)")
	fs.StringVar(&c.RegistryDir, "registry-dir", c.RegistryDir, "embedded registry storage (default <data-dir>/registry)")
}

// RegistryRoot is the embedded registry's storage directory: --registry-dir,
// or <data-dir>/registry.
func (c Config) RegistryRoot() string {
	if c.RegistryDir != "" {
		return c.RegistryDir
	}
	return filepath.Join(c.DataDir, "registry")
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
	if c.NodeHeartbeatTTL < time.Second || c.NodeHeartbeatTTL > 10*time.Minute {
		errs = append(errs, errors.New("--node-heartbeat-ttl must be between 1s and 10m"))
	}
	if c.NodeHeartbeatGrace < 0 || c.NodeHeartbeatGrace > 10*time.Minute {
		errs = append(errs, errors.New("--node-heartbeat-grace must be between 0 and 10m"))
	}
	if c.NodeTokenTTL < time.Minute || c.NodeTokenTTL > time.Hour {
		errs = append(errs, errors.New("--node-token-ttl must be between 1m and 1h"))
	}
	if c.WorkerOperationTimeout < time.Second || c.WorkerOperationTimeout > 7*24*time.Hour {
		errs = append(errs, fmt.Errorf("--worker-operation-timeout %s: want between 1s and 168h", c.WorkerOperationTimeout))
	}
	if c.WorkerLease < time.Second || c.WorkerLease > time.Hour {
		errs = append(errs, fmt.Errorf("--worker-lease %s: want between 1s and 1h", c.WorkerLease))
	}
	if c.SchemaCheckInterval < 100*time.Millisecond || c.SchemaCheckInterval > 10*time.Minute {
		errs = append(errs, fmt.Errorf("--schema-check-interval %s: want between 100ms and 10m", c.SchemaCheckInterval))
	}
	if c.InstanceDriveInterval < 100*time.Millisecond || c.InstanceDriveInterval > 10*time.Minute {
		errs = append(errs, fmt.Errorf("--instance-drive-interval %s: want between 100ms and 10m", c.InstanceDriveInterval))
	}
	if c.NodeTaskLease < time.Second || c.NodeTaskLease > time.Hour {
		errs = append(errs, errors.New("--node-task-lease must be between 1s and 1h"))
	}
	if c.AppTokenTTL < 30*time.Second || c.AppTokenTTL > 5*time.Minute {
		errs = append(errs, errors.New("--app-token-ttl must be between 30s and 5m: it bounds how long a revoked role keeps an app's UI open"))
	}
	if c.ConsoleIdleTimeout < time.Minute || c.ConsoleIdleTimeout > 24*time.Hour {
		errs = append(errs, errors.New("--console-idle-timeout must be between 1m and 24h"))
	}
	if c.ConsoleMaxAge < 10*time.Minute || c.ConsoleMaxAge > 7*24*time.Hour {
		errs = append(errs, errors.New("--console-max-age must be between 10m and 168h"))
	}
	if d := c.AppsDomain; d != "" && (strings.ContainsAny(d, ":/ *") || strings.HasPrefix(d, ".") || !strings.Contains(d, ".") && d != "localhost") {
		errs = append(errs, fmt.Errorf("--apps-domain %q: want a DNS name like apps.example.com (no scheme, port or wildcard)", d))
	}
	if c.AppsListen != "" {
		if _, _, err := net.SplitHostPort(c.AppsListen); err != nil {
			errs = append(errs, fmt.Errorf("--apps-listen %q: want host:port", c.AppsListen))
		} else if c.AppsDomain == "" {
			errs = append(errs, errors.New("--apps-listen needs --apps-domain: it serves the app origins under that domain"))
		}
	}
	if c.InstanceDeployTimeout < 0 || c.InstanceDeployTimeout > 2*time.Hour {
		errs = append(errs, errors.New("--instance-deploy-timeout must be between 0 and 2h"))
	}
	if c.IdempotencyTTL < time.Minute {
		errs = append(errs, errors.New("--idempotency-ttl must be at least 1m"))
	}
	// Deleting audit rows is opt-in and cannot be undone: a retention
	// shorter than a day is almost certainly a unit slip, not a policy.
	if c.AuditRetention < 0 {
		errs = append(errs, fmt.Errorf("--audit-retention %s: must not be negative; set 0 to keep audit rows forever, or a duration of at least 24h (720h is 30 days) to delete rows older than it", c.AuditRetention))
	} else if c.AuditRetention > 0 && c.AuditRetention < 24*time.Hour {
		errs = append(errs, fmt.Errorf("--audit-retention %s: want at least 24h, or 0 to keep audit rows forever; an audit trail shorter than a day is almost certainly a typo (720m is 12 hours, 720h is 30 days)", c.AuditRetention))
	}
	if c.MaxBlobBytes < 1 || c.ProjectBlobQuota < 0 {
		errs = append(errs, errors.New("--max-blob-bytes must be positive and --project-blob-quota-bytes not negative"))
	}
	if c.MaxRegistryBlob < 1 || c.RegistryQuota < 0 {
		errs = append(errs, fmt.Errorf("--max-registry-blob-bytes %d must be positive and --project-registry-quota-bytes %d not negative", c.MaxRegistryBlob, c.RegistryQuota))
	}
	// A burst under 1 lets no request through (every sign-in is 429 for
	// ever), and NaN or infinity is no rate an operator meant.
	errs = append(errs, checkRate("--credential-rate", c.CredentialRate, "--credential-burst", c.CredentialBurst, "requests per second", "every sign-in")...)
	errs = append(errs, checkRate("--runtime-event-rate", c.RuntimeEventRate, "--runtime-event-burst", c.RuntimeEventBurst, "events per second per app instance", "every runtime event, heartbeats included")...)
	errs = append(errs, checkRate("--usage-event-rate", c.UsageEventRate, "--usage-event-burst", c.UsageEventBurst, "usage events per second per app instance", "every usage report")...)
	errs = append(errs, checkRate("--node-request-rate", c.NodeRequestRate, "--node-request-burst", c.NodeRequestBurst, "requests per second per node and endpoint", "every heartbeat")...)
	errs = append(errs, checkRate("--unwrap-rate", c.UnwrapRate, "--unwrap-burst", c.UnwrapBurst, "unwraps per second per principal", "every unwrap, image pulls included")...)
	if c.RuntimeEventRetention < 0 {
		errs = append(errs, fmt.Errorf("--runtime-event-retention %d: want a number of timeline rows per app instance, 0 to keep every row", c.RuntimeEventRetention))
	}
	if c.ShutdownTimeout < 0 || c.ShutdownTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("--shutdown-timeout %s: want between 0 (no grace) and 1h", c.ShutdownTimeout))
	}
	// A registry token that expires at once fails every push and pull; one
	// that lives long outlasts the roles it was checked against.
	if c.RegistryTokenTTL < 30*time.Second || c.RegistryTokenTTL > time.Hour {
		errs = append(errs, fmt.Errorf("--registry-token-ttl %s: want between 30s and 1h", c.RegistryTokenTTL))
	}
	if c.RegistryURL != "" {
		if err := originURL(c.RegistryURL); err != nil {
			errs = append(errs, fmt.Errorf("--registry-url %q: %v", c.RegistryURL, err))
		}
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
	if len(c.BillingCurrency) != 3 || strings.ToUpper(c.BillingCurrency) != c.BillingCurrency {
		errs = append(errs, fmt.Errorf("--billing-currency %q: want a three-letter ISO 4217 code such as USD", c.BillingCurrency))
	}
	if c.BillingMaxEventAge < time.Minute {
		errs = append(errs, errors.New("--billing-max-event-age must be at least 1m"))
	}
	if c.BillingSlice < time.Second || c.BillingSlice > 24*time.Hour {
		errs = append(errs, errors.New("--billing-slice must be between 1s and 24h"))
	}
	if c.BillingMeterInterval < 100*time.Millisecond {
		errs = append(errs, errors.New("--billing-meter-interval must be at least 100ms"))
	}
	errs = append(errs, c.Events.validate()...)
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.Listen
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if err := originURL(c.PublicURL); err != nil {
		errs = append(errs, fmt.Errorf("--public-url %q: %v", c.PublicURL, err))
	} else if u, _ := url.Parse(c.PublicURL); c.AppsDomain != "" {
		// Every name under the apps domain is an app's origin to the
		// gateway: a console there would be unreachable, and share its
		// cookies' site with every app.
		h, d := strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")), strings.ToLower(strings.Trim(c.AppsDomain, "."))
		if h == d || strings.HasSuffix(h, "."+d) {
			errs = append(errs, fmt.Errorf("--public-url %s: its host lies under --apps-domain %s, whose names are the apps' origins; give the console a name outside it (console.example.com beside apps.example.com)", c.PublicURL, c.AppsDomain))
		}
	}
	c.WorkloadAPIURL = strings.TrimRight(c.WorkloadAPIURL, "/")
	if c.WorkloadAPIURL != "" {
		if u, err := url.Parse(c.WorkloadAPIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--workload-api-url %q: want an absolute http(s) URL", c.WorkloadAPIURL))
		}
	}
	if c.DataDir != "" {
		abs, err := filepath.Abs(c.DataDir)
		if err == nil {
			c.DataDir = abs
		}
	}
	return errors.Join(errs...)
}

func (e *Events) validate() []error {
	var errs []error
	if e.RelayInterval <= 0 || e.KeepAlive <= 0 || e.WriteTimeout <= 0 || e.DuplicateWindow <= 0 {
		errs = append(errs, errors.New("--events-relay-interval, --events-keepalive, --events-write-timeout and --events-duplicate-window must be positive"))
	}
	if e.Reauthorize < 10*time.Millisecond || e.Reauthorize > 5*time.Second {
		errs = append(errs, errors.New("--events-reauth-interval must be between 10ms and 5s (a reader who lost access is cut off within it)"))
	}
	if e.LeaseTTL < 2*e.RelayInterval {
		errs = append(errs, errors.New("--events-lease-ttl must be at least twice --events-relay-interval (the leader renews it every pass)"))
	}
	if e.Retention < 0 || e.StreamMaxAge < 0 {
		errs = append(errs, errors.New("--events-retention and --events-stream-max-age must not be negative"))
	}
	if e.Stream == "" {
		errs = append(errs, errors.New("--events-stream must name a JetStream stream"))
	}
	if e.NATSURL == "" && (e.NATSCredsFile != "" || e.NATSNKeyFile != "") {
		errs = append(errs, errors.New("--nats-creds and --nats-nkey need --nats-url (they are for an external NATS)"))
	}
	if e.NATSURL != "" && (e.NATSListen != "" || e.NATSSync != "") {
		errs = append(errs, errors.New("--nats-listen and --nats-sync configure the embedded NATS; set sync_interval on the external cluster instead"))
	}
	return errs
}

// originURL checks a URL the server hands out as its own address (API
// base, registry, token realm, console origin): http or https, a host, and
// nothing a client would carry wrongly into every link built on it.
func originURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("want an http:// or https:// URL")
	case u.Host == "":
		return errors.New("want a host, as in https://gpuaas.example.com")
	case u.User != nil:
		return errors.New("a user or password in the URL would be handed to every client; remove it")
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return errors.New("want no query or fragment")
	case u.Path != "" && u.Path != "/":
		return errors.New("want no path: gpuaas serves at the root of its origin (put a path-routing proxy's prefix elsewhere)")
	}
	return nil
}

// ProductionWarnings names the settings `gpuaas server` accepts but that a
// production deployment usually should not run with; the server logs each
// at start. They are not errors: one replica on SQLite, or plain HTTP on a
// private network, can be what an operator chose.
func (c Config) ProductionWarnings() []string {
	var w []string
	if strings.HasPrefix(c.DatabaseURL, "sqlite:") {
		w = append(w, "the database is SQLite: one replica only, and no point-in-time backups; use PostgreSQL (--database-url postgres://…) in production")
	}
	if c.Events.NATSURL == "" {
		w = append(w, "NATS is embedded: replicas do not share events or wake-ups; give every replica the same --nats-url in production")
	}
	if u, err := url.Parse(c.PublicURL); err == nil && u.Scheme == "http" && !LoopbackHost(u.Hostname()) {
		w = append(w, fmt.Sprintf("--public-url %s is plain HTTP on a non-loopback host: passwords, tokens and console cookies travel unencrypted (and the cookies lose Secure); serve https behind TLS", c.PublicURL))
	}
	return w
}

// LoopbackHost reports whether host (without its port; an IPv6 address in
// brackets or not) names this machine's loopback: localhost, a name under
// .localhost, or a loopback address. Browsers treat such origins as
// trustworthy, as they do https.
func LoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// checkRate validates a per-key rate limit: a finite rate of 0 or more,
// and while it is set a burst of at least 1 (0 would refuse what, for
// ever).
func checkRate(rateFlag string, rate float64, burstFlag string, burst int, unit, what string) []error {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0 {
		return []error{fmt.Errorf("%s %v: want a number of %s, 0 for no limit", rateFlag, rate, unit)}
	}
	if rate > 0 && burst < 1 {
		return []error{fmt.Errorf("%s %d: want at least 1 while %s is set (0 would refuse %s)", burstFlag, burst, rateFlag, what)}
	}
	return nil
}
