package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/server"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/spf13/cobra"
)

// devAgentStarter starts the in-process node agent of `gpuaas dev`. It is
// the seam the node agent (internal/agent) plugs into; nil means this build
// runs dev mode without a node.
var devAgentStarter server.DevAgentStarter

func newDevCmd() *cobra.Command {
	cfg := config.Defaults()
	cfg.LogFormat = "text"
	withNode, ownBuild := true, true
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything on this machine with no setup (embedded SQLite)",
		Long: `Starts the control plane on an embedded SQLite database under --data-dir,
seeds a dev org, project and platform admin (once), and writes
<data-dir>/dev-credentials.json (mode 0600). A restart keeps all data.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.ApplyEnv(cmd.Flags(), nil); err != nil {
				return err
			}
			c, err := server.DevConfig(cfg)
			if err != nil {
				return err
			}
			if err := c.Validate(); err != nil {
				return err
			}
			lock, err := server.LockDataDir(c.DataDir)
			if err != nil {
				return err
			}
			defer lock.Close()
			// A taken port should fail before migrations touch the database.
			if err := checkListen(c.Listen); err != nil {
				return err
			}
			ctx := cmd.Context()
			app, err := server.New(ctx, c, nil)
			if err != nil {
				return err
			}
			defer app.Close()
			if err := app.Listen(); err != nil {
				return err
			}
			creds, err := app.SeedDev(ctx)
			if err != nil {
				return err
			}
			_ = lock.Describe(fmt.Sprintf("gpuaas dev (pid %d, API %s)", os.Getpid(), creds.APIURL))
			// The release and node lines are written from their own
			// goroutines, as each finishes.
			out := &lockedWriter{w: cmd.OutOrStdout()}
			fmt.Fprintf(out, "\ngpuaas dev is running\n  API:          %s\n  registry:     %s (OCI, token auth; push with publish-intent credentials)\n  admin:        %s\n  credentials:  %s\n  data dir:     %s\n",
				creds.APIURL, app.RegistryHost(), creds.AdminEmail, server.CredentialsPath(c.DataDir), c.DataDir)
			if a := app.AppsAddr(); a != "" {
				_, port, _ := net.SplitHostPort(a)
				fmt.Fprintf(out, "  app UIs:      http://<instance-id>.%s:%s (the UI gateway; open them from the console)\n", c.AppsDomain, port)
			}
			fmt.Fprintln(out)
			// Hashing and storing this binary (tens of MB) must not hold up
			// the API: it is published beside Serve and says when it is there.
			go func() {
				if !ownBuild {
					return
				}
				own, err := app.ServeOwnBuild(ctx)
				if err != nil {
					if ctx.Err() == nil {
						fmt.Fprintf(out, "  warning:      this build is not served as a release: %v\n", err)
					}
					return
				}
				fmt.Fprintf(out, "  release:      %s (curl -fO %s/api/v1/platform/releases/%s/artifacts/%s)\n", own.Version, creds.APIURL, own.Version, own.Artifact)
			}()
			// The node needs the API serving (its agent joins over HTTP), so
			// it starts beside Serve and reports when it is there.
			if !withNode {
				fmt.Fprintf(out, "  node:         none (--node=false)\n")
				return app.Serve(ctx)
			}
			if socket := server.DockerSocket(); server.DockerAnswers(ctx, socket) {
				if err := app.ListenForWorkloads(ctx, socket); err != nil {
					fmt.Fprintf(out, "  warning:      %v; app instances cannot call the API (set --workload-api-url)\n", err)
				} else if app.Config.WorkloadAPIURL != "" {
					fmt.Fprintf(out, "  instances:    call the API at %s\n", app.Config.WorkloadAPIURL)
				}
			}
			go func() {
				n := app.StartDevNode(ctx, devAgentStarter, creds, 60*time.Second)
				if n.Reason != "" && n.NodeID == "" {
					fmt.Fprintf(out, "  node:         none (%s)\n", n.Reason)
					return
				}
				fmt.Fprintf(out, "  node:         %s (%d GPUs), dev allocation %s for the dev project\n", n.NodeID, n.GPUs, n.AllocationID)
				if n.Stop != nil {
					context.AfterFunc(ctx, n.Stop)
				}
			}()
			return app.Serve(ctx)
		},
	}
	cfg.Bind(cmd.Flags())
	cmd.Flags().BoolVar(&withNode, "node", withNode, "run an in-process node agent (with a dev allocation) when a Docker engine answers")
	cmd.Flags().BoolVar(&ownBuild, "serve-own-build", ownBuild, "publish this binary as the platform release of its version (gpuaas-<os>-<arch>), so that other machines can download it")
	return cmd
}

func newServerCmd() *cobra.Command {
	cfg := config.Defaults()
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the production control plane (PostgreSQL)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.ApplyEnv(cmd.Flags(), nil); err != nil {
				return err
			}
			ctx := cmd.Context()
			app, err := server.New(ctx, cfg, nil)
			if err != nil {
				return err
			}
			defer app.Close()
			for _, w := range cfg.ProductionWarnings() {
				app.Logger.WarnContext(ctx, "not a production setting: "+w)
			}
			return app.Serve(ctx)
		},
	}
	cfg.Bind(cmd.Flags())
	return cmd
}

func newMigrateCmd() *cobra.Command {
	var (
		url   string
		check bool
	)
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending database migrations and exit",
		Long: `Apply pending database migrations and exit.

A binary runs only on the schema it was built for: once a release's
migrations are applied, replicas of the release before stop being ready.
An upgrade that brings migrations stops every replica, migrates, then
starts the new ones; --check says whether this binary brings any
(docs/operations.md, "Upgrading").`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.ApplyEnv(cmd.Flags(), nil); err != nil {
				return err
			}
			if url == "" {
				return fmt.Errorf("--database-url (or GPUAAS_DATABASE_URL) is required")
			}
			if check {
				return checkMigrations(cmd.Context(), cmd, url)
			}
			return migrate(cmd.Context(), cmd, url)
		},
	}
	cmd.Flags().StringVar(&url, "database-url", "", "postgres://… or sqlite://PATH")
	cmd.Flags().BoolVar(&check, "check", false, "apply nothing: say how many migrations this binary would apply")
	return cmd
}

// checkMigrations says, applying nothing, whether this binary brings
// migrations: whether its release can be rolled out replica by replica.
func checkMigrations(ctx context.Context, cmd *cobra.Command, url string) error {
	db, err := store.Open(ctx, url, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	cur, err := db.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	latest := store.LatestVersion(db.Dialect())
	var line string
	switch {
	case cur > latest:
		return fmt.Errorf("the %s schema is at version %d, newer than this binary's %d: run the release that migrated it, or a later one", db.Dialect(), cur, latest)
	case cur == latest:
		line = fmt.Sprintf("the %s schema is at version %d, this binary's: nothing to apply; replicas can be replaced one by one", db.Dialect(), cur)
	default:
		line = fmt.Sprintf("the %s schema is at version %d, this binary's at %d: %d migration(s) to apply. Replicas of the running release stop being ready once they are: stop them all, run gpuaas migrate, then start this release",
			db.Dialect(), cur, latest, latest-cur)
	}
	return printOutcome(cmd, line, map[string]any{"dialect": db.Dialect(), "schema_version": cur, "binary_version": latest, "pending": latest - cur},
		"dialect", "schema_version", "binary_version", "pending")
}

func migrate(ctx context.Context, cmd *cobra.Command, url string) error {
	db, err := store.Open(ctx, url, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	n, err := db.Migrate(ctx)
	if err != nil {
		return err
	}
	v, err := db.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	return printOutcome(cmd, fmt.Sprintf("applied %d migration(s); %s schema is at version %d", n, db.Dialect(), v),
		map[string]any{"applied": n, "dialect": db.Dialect(), "schema_version": v}, "applied", "dialect", "schema_version")
}

// checkListen fails early, with the address named, when it cannot be bound.
func checkListen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w (is another gpuaas running? pass --listen)", addr, err)
	}
	return l.Close()
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// String is what b, the buffer l writes to, holds, read under l's lock.
func (l *lockedWriter) String(b *bytes.Buffer) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return b.String()
}
