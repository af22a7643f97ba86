// Package server wires the store, the domains and the HTTP API into one
// runnable control plane, for both `gpuaas dev` and `gpuaas server`.
package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gpuaas/gpuaas/api"
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/audit"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/gateway"
	"github.com/gpuaas/gpuaas/internal/httpapi"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/releases"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/wakeup"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// App is a running control plane.
type App struct {
	Config config.Config
	Logger *slog.Logger
	DB     *store.DB
	IAM    *iam.Service
	Tokens *iam.Tokens
	API    *httpapi.API

	listener net.Listener
	// workloadListener serves the same API where app instances reach it
	// (ListenForWorkloads); nil when they use the main listener.
	workloadListener net.Listener
	// appsListener serves the app origins on the gateway's own engine
	// (--apps-listen); appsPort is the port app links name ("" for the
	// public URL's, behind a load balancer).
	appsListener net.Listener
	appsPort     string
	apps         *gateway.AppsServer
	http         *http.Server
	artifacts    *artifactParts // registry and blob store (issue 5)
	// Nodes is the nodes domain; Workers are the background jobs Serve runs.
	Nodes   *nodes.Service
	Workers worker.Group
	// Instances is the app-instance domain; its driver is one of Workers.
	Instances *instances.Service
	// Releases is the platform's own release catalog (issue 21).
	Releases *releases.Service
	events   *eventParts      // NATS, outbox relay, event streams (issue 10)
	billing  *billingParts    // usage, ledger, budgets (issue 13)
	gateway  *gateway.Gateway // instance UIs on their own origins (issue 20)
	// auditPruner deletes audit rows past --audit-retention.
	auditPruner *worker.Periodic
	// registryHolds releases the registry quota of abandoned pushes;
	// registryRecounts gives back what deleted images held.
	registryHolds, registryRecounts *worker.Periodic
	// signingKeyReload reads the token signing keys again (signingkeys.go);
	// registryKeys hands the registry's to it.
	signingKeyReload *worker.Periodic
	registryKeys     *artifacts.RegistryKeyReloader
	// guard runs the event workers and Workers while the schema is the
	// binary's, and refuses changes while it is not (schemaguard.go).
	guard *schemaGuard
	// now is the one clock every service reads (config.Now; the wall
	// clock by default).
	now func() time.Time
	// releaseStorage ends the hold on the embedded registry's storage
	// taken before the database was opened (registry.HoldStorage).
	releaseStorage func() error
}

// NewLogger builds the process logger from the config.
func NewLogger(cfg config.Config) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, opts))
}

// New opens the database, applies migrations (or checks the schema), loads
// keys and builds the API. It does not listen yet.
func New(ctx context.Context, cfg config.Config, logger *slog.Logger) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = NewLogger(cfg)
	}
	if cfg.DataDir != "" {
		// The data dir holds the database, keys and tenants' blobs: owner
		// only, whatever the umask or an earlier version left.
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("data dir mode: %w", err)
		}
	}
	key, err := masterKey(cfg)
	if err != nil {
		return nil, err
	}
	seal, err := sealer.New(key)
	if err != nil {
		return nil, err
	}
	now := clock.Or(cfg.Now) // the one clock of this server (config.Config.Now)
	ok := false
	// `gpuaas registry gc` may hold the embedded registry's storage: find
	// out before the database is opened and migrated, not once the server
	// is half up. The hold lasts until Close, so gc cannot start meanwhile.
	releaseStorage := func() error { return nil }
	if cfg.RegistryURL == "" {
		if releaseStorage, err = registry.HoldStorage(cfg.RegistryRoot()); err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
		defer func() {
			if !ok {
				_ = releaseStorage()
			}
		}()
	}
	db, err := store.Open(ctx, cfg.DatabaseURL, logger)
	if err != nil {
		return nil, err
	}
	db.SetClock(now) // what the store stamps itself: audit, outbox, idempotency commits
	defer func() {
		if !ok {
			_ = db.Close()
		}
	}()
	if cfg.AutoMigrate {
		if _, err := db.Migrate(ctx); err != nil {
			return nil, err
		}
	}
	if err := db.CheckSchema(ctx); err != nil {
		return nil, err
	}
	warnClockOffset(ctx, db, now, logger)
	// The domains are built in dependency order, each from its Deps; the
	// three true back-edges (a domain built later vouching to one built
	// earlier) are registrations that add and never replace: the token
	// checkers, and the instances domain's say in retiring versions and
	// artifacts.
	a := &App{Config: cfg, Logger: logger, DB: db, now: now, releaseStorage: releaseStorage}
	if a.artifacts, err = newArtifactParts(ctx, db, seal, cfg, key, now); err != nil {
		return nil, err
	}
	if a.events, err = a.newEventParts(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if !ok {
			a.events.close()
		}
	}()
	wake := a.events.wake
	iamStore := store.IAM(db)
	ring, err := iam.LoadKeyring(ctx, iamStore.Read(), seal, "access_token", now)
	if err != nil {
		return nil, err
	}
	a.signingKeyReload = a.newSigningKeyReload(ring)
	tokens := iam.NewTokens(iamStore.Read(), ring, cfg.AccessTokenTTL, cfg.ServiceAccountTokenTTL, now)
	tokens.NodeTTL = cfg.NodeTokenTTL
	// Open event streams, on every replica, re-check their reader at once
	// when access changes.
	svc := &iam.Service{Store: iamStore, Tokens: tokens, Logger: logger, Now: now, OnAccessChanged: func() { wake.Notify(wakeup.AccessChanged) },
		// Failed sign-ins are counted under a hash keyed by the master
		// key, which every replica shares, so they count the same account.
		LoginKey: subkey(key, "gpuaas/iam/login-failures/v1")}
	a.IAM, a.Tokens = svc, tokens
	sa := serviceaccounts.New(serviceaccounts.Deps{Store: store.ServiceAccounts(db), IAM: svc, Tokens: tokens, Logger: logger, Now: now,
		TokenURL: func() string { return a.Config.PublicURL + "/api/v1/auth/service-account/token" }})
	tokens.CheckServiceAccountsWith(sa)
	a.billing = newBillingParts(cfg, db, svc, now)
	arts := artifacts.New(artifacts.Deps{Store: store.Artifacts(db), IAM: svc, Logger: logger, Sealer: seal, Blobs: a.artifacts.blobs, BlobQuota: cfg.ProjectBlobQuota, Now: now,
		SignatureTags: a.artifacts.sigTags, RegistryQuota: cfg.RegistryQuota, MaxRegistryBlob: cfg.MaxRegistryBlob,
		RegistryStreamTimeout: cfg.StreamTimeout, UnwrapRate: cfg.UnwrapRate, UnwrapBurst: cfg.UnwrapBurst})
	if w := arts.UploadSweeper(); w != nil {
		a.Workers = append(a.Workers, w)
	}
	// Registry quota held by pushes that will never finish goes back to
	// their projects (and their partial uploads go).
	a.registryHolds = arts.RegistryHoldSweeper()
	// What deleted images held goes back to their projects, in a job of
	// its own so that neither waits for the other.
	a.registryRecounts = arts.RegistryRecounter()
	a.Workers = append(a.Workers, a.registryHolds, a.registryRecounts)
	cat := catalog.NewService(catalog.Deps{Store: store.Catalog(db), IAM: svc, Logger: logger, Now: now, ArtifactGate: arts})
	a.Nodes = nodes.New(nodes.Deps{Store: store.Nodes(db), IAM: svc, Tokens: tokens, Sealer: seal, Logger: logger, Wake: wake, Now: now,
		LaunchGate:   a.billing.svc,
		TokenURL:     func() string { return a.Config.PublicURL + "/api/v1/nodes/token" },
		HeartbeatTTL: cfg.NodeHeartbeatTTL, HeartbeatGrace: cfg.NodeHeartbeatGrace, TaskLease: cfg.NodeTaskLease,
		RequestRate: cfg.NodeRequestRate, RequestBurst: cfg.NodeRequestBurst})
	tokens.CheckNodesWith(a.Nodes)
	a.Workers = append(a.Workers, a.Nodes.Liveness(logger))
	link := instances.NodesLink{Nodes: a.Nodes}
	a.Instances = instances.New(instances.Deps{Store: store.Instances(db), IAM: svc, SA: sa, Logger: logger, Now: now,
		Allocations: link, Tasks: link, Releases: a.Nodes, LaunchGate: a.billing.svc, Pulls: instances.ArtifactPulls{Artifacts: arts},
		APIBaseURL: a.workloadAPIURL, RegistryHost: a.RegistryHost,
		ReadinessTimeout: cfg.InstanceDeployTimeout, UIBasePath: uiBasePath(cfg), Wake: wake,
		DriveInterval: cfg.InstanceDriveInterval, WorkerOperationTimeout: cfg.WorkerOperationTimeout, WorkerLease: cfg.WorkerLease,
		RuntimeEventRate: cfg.RuntimeEventRate, RuntimeEventBurst: cfg.RuntimeEventBurst, RuntimeEventRetention: cfg.RuntimeEventRetention,
		Leader: a.events.relay.Leader})
	link.Attach(a.Instances)
	cat.AddInstanceGate(a.Instances)
	arts.AddInstanceUsage(a.Instances)
	a.Workers = append(a.Workers, a.Instances.Worker(), a.Instances.HeartbeatWorker(), a.Instances.DeadlineWorker(), a.Instances.RetentionWorker(), a.billing.meter, a.billing.rating)
	// Audit rows older than --audit-retention go (none with the default 0);
	// like the outbox cleaner, only the relay's leader deletes them, from
	// the moment it takes the lease.
	pruner := &audit.Pruner{Store: store.Audit(db), Retention: cfg.AuditRetention, Leader: a.events.relay.Leader,
		Logger: logger.With("component", "audit.retention"), Now: now}
	a.auditPruner = pruner.Worker()
	a.events.relay.OnLead = append(a.events.relay.OnLead, a.auditPruner.Kick)
	a.Workers = append(a.Workers, a.auditPruner)
	releaseKey, err := releases.LoadSigningKey(ctx, db.Queries(), seal, now)
	if err != nil {
		return nil, err
	}
	a.Releases = releases.New(releases.Deps{Store: store.Releases(db), IAM: svc, Blobs: a.artifacts.blobs, Key: releaseKey, Logger: logger, Now: now})
	a.guard = newSchemaGuard(db.CheckSchema, cfg.SchemaCheckInterval, logger)
	// The edge is not a domain, so store does not name it: NewPort checks
	// here, at start, that the store implements what the edge declares.
	a.API = &httpapi.API{
		Store: store.NewPort[httpapi.Tx, httpapi.Queries](db), Health: db, IAM: svc, Tokens: tokens, Logger: logger,
		MaxBodyBytes: cfg.MaxBodyBytes, IdempotencyTTL: cfg.IdempotencyTTL, IdempotencyHashKey: subkey(key, "gpuaas/idempotency/request-hash/v1"),
		OpenAPI: api.OpenAPI, AsyncAPI: api.AsyncAPI,
		CredentialRate: cfg.CredentialRate, CredentialBurst: cfg.CredentialBurst, StreamTimeout: cfg.StreamTimeout,
		SA: sa, Catalog: cat, Artifacts: arts, Nodes: a.Nodes, Instances: a.Instances, Events: a.events.reader, RelayKick: func() { wake.Notify(wakeup.EventsCommitted) }, WebSocketOrigins: cfg.Events.WebSocketOrigins, Billing: a.billing.svc, Releases: a.Releases,
		PublicURL: func() string { return a.Config.PublicURL }, Now: now, Writable: a.guard.Writable,
	}
	if err := a.webParts(key); err != nil {
		return nil, err
	}
	ok = true
	return a, nil
}

// subkey derives the key of one use from the master key: each use its own,
// none revealing the master key or another's.
func subkey(masterKey []byte, use string) []byte {
	mac := hmac.New(sha256.New, masterKey)
	mac.Write([]byte(use))
	return mac.Sum(nil)
}

func masterKey(cfg config.Config) ([]byte, error) {
	if cfg.SecretKey != "" {
		return sealer.DecodeKey(cfg.SecretKey)
	}
	// A production key file that is missing is an operator error, never
	// something to paper over by minting a new key.
	return sealer.ReadKeyFile(cfg.SecretKeyFile)
}

// Listen binds the configured address (port 0 picks a free port).
func (a *App) Listen() error {
	l, err := net.Listen("tcp", a.Config.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", a.Config.Listen, err)
	}
	a.listener = l
	// Port 0: the public URL follows the bound port, and so does the
	// registry (its host and token realm are the API listener's).
	direct := a.Config.PublicURL == "http://"+a.Config.Listen
	if direct {
		a.Config.PublicURL = "http://" + l.Addr().String()
	}
	if a.Config.AppsListen != "" && a.gateway.Enabled() {
		al, err := net.Listen("tcp", a.Config.AppsListen)
		if err != nil {
			_ = l.Close()
			return fmt.Errorf("listen on %s (--apps-listen): %w", a.Config.AppsListen, err)
		}
		a.appsListener = al
		// Browsers reach this server at its listen address, with no load
		// balancer routing the apps domain: app links name this
		// listener's own port.
		if direct {
			_, a.appsPort, _ = net.SplitHostPort(al.Addr().String())
		}
	}
	return a.startRegistry()
}

// AppsAddr is the apps listener's bound address, after Listen ("" without
// one).
func (a *App) AppsAddr() string {
	if a.appsListener == nil {
		return ""
	}
	return a.appsListener.Addr().String()
}

// Addr is the bound address, after Listen.
func (a *App) Addr() string { return a.listener.Addr().String() }

// Serve runs the HTTP server until ctx ends, then drains in-flight requests
// for up to the shutdown timeout.
func (a *App) Serve(ctx context.Context) error {
	if a.listener == nil {
		if err := a.Listen(); err != nil {
			return err
		}
	}
	a.http = &http.Server{
		Handler:           a.handler(),
		ReadHeaderTimeout: min(10*time.Second, a.Config.ReadTimeout),
		ReadTimeout:       a.Config.ReadTimeout,
		WriteTimeout:      a.Config.WriteTimeout,
		IdleTimeout:       a.Config.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(a.Logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	// Streams end at shutdown instead of holding the drain open.
	a.http.RegisterOnShutdown(a.events.reader.Shutdown)
	// The signing keys are read again outside the schema guard: a replica
	// whose jobs are paused (the schema moved on under it) still serves
	// authenticated reads, so a key retired meanwhile must stop verifying
	// there too.
	if err := a.signingKeyReload.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	defer a.signingKeyReload.Stop()
	// The event workers, then Workers, run under the schema guard.
	if err := a.guard.Start(context.WithoutCancel(ctx), worker.Group{a.events.workers, a.Workers}); err != nil {
		return err
	}
	defer a.guard.Stop()
	// The listener is bound (connections queue until Serve accepts), so
	// whoever reads the address file may connect at once.
	if a.Config.AddrFile != "" {
		if err := writeAddrFile(a.Config.AddrFile, "http://"+a.Addr()); err != nil {
			return fmt.Errorf("--addr-file: %w", err)
		}
		defer os.Remove(a.Config.AddrFile)
	}
	errc := make(chan error, 3)
	go func() { errc <- a.http.Serve(a.listener) }()
	if a.workloadListener != nil {
		go func() { errc <- a.http.Serve(a.workloadListener) }()
	}
	if a.appsListener != nil {
		a.apps = a.gateway.NewAppsServer(gateway.AppsServerConfig{
			ReadTimeout: a.Config.ReadTimeout, WriteTimeout: a.Config.WriteTimeout, IdleTimeout: a.Config.IdleTimeout})
		go func() {
			if err := a.apps.Serve(a.appsListener); err != nil {
				errc <- fmt.Errorf("apps listener: %w", err)
			}
		}()
		a.Logger.Info("gpuaas serving app origins", "addr", a.AppsAddr(), "apps_domain", a.Config.AppsDomain)
	}
	a.Logger.Info("gpuaas listening", "addr", a.Addr(), "database", string(a.DB.Dialect()))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	a.Logger.Info("shutting down", "grace", a.Config.ShutdownTimeout.String())
	a.Nodes.EndPolls()
	sctx, cancel := context.WithTimeout(context.Background(), a.Config.ShutdownTimeout)
	defer cancel()
	// Both listeners drain at once, in the same grace: an app's event
	// stream must not spend the API's.
	appsDone := make(chan error, 1)
	if a.apps != nil {
		go func() { appsDone <- a.apps.Shutdown(sctx) }()
	} else {
		appsDone <- nil
	}
	if err := a.http.Shutdown(sctx); err != nil {
		<-appsDone
		return fmt.Errorf("graceful shutdown: %w", err)
	}
	if err := <-appsDone; err != nil {
		return fmt.Errorf("graceful shutdown of the apps listener: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close stops the event pipeline and releases the database.
func (a *App) Close() error {
	if a.workloadListener != nil {
		_ = a.workloadListener.Close() // already closed when Serve ran
	}
	if a.appsListener != nil && a.apps == nil {
		_ = a.appsListener.Close() // bound, never served
	}
	a.events.close()
	return errors.Join(a.closeRegistry(), a.DB.Close(), a.releaseStorage())
}

// Now is the server's clock: what every service reads as the time.
func (a *App) Now() time.Time { return a.now() }

// SchemaGuard is this replica's schema check (tests kick and wait on it):
// Paused says whether it holds the background jobs stopped.
func (a *App) SchemaGuard() (check *worker.Periodic, paused func() bool) {
	return &a.guard.periodic, a.guard.Paused
}

// AuditPruner is this replica's audit retention worker.
func (a *App) AuditPruner() *worker.Periodic { return a.auditPruner }

// RegistryHoldSweeper is the job that releases abandoned registry pushes'
// quota (tests kick it and wait on its runs).
func (a *App) RegistryHoldSweeper() *worker.Periodic { return a.registryHolds }

// RegistryRecounter is the job that gives back the registry quota of
// deleted images (tests wait on the run a delete kicks).
func (a *App) RegistryRecounter() *worker.Periodic { return a.registryRecounts }
