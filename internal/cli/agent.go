package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/gpuaas/gpuaas/internal/agent"
	"github.com/gpuaas/gpuaas/internal/buildinfo"
	"github.com/spf13/cobra"
)

func init() {
	// gpuaas dev runs one in-process agent when Docker answers.
	devAgentStarter = startDevAgent
}

// startDevAgent is the in-process agent of `gpuaas dev`: one agent joining
// the dev server with the token dev mode minted, its state under dataDir.
// It lives here, in the wiring, so the agent never imports the server.
func startDevAgent(ctx context.Context, apiURL, joinToken, dataDir string) (func(), error) {
	a, err := agent.New(agent.Config{Server: apiURL, JoinToken: joinToken, DataDir: dataDir, Name: "dev-node",
		Version: buildinfo.Read().Version, AdvertiseAddress: "127.0.0.1"}) // the dev node is this machine
	if err != nil {
		return nil, err
	}
	if err := a.Start(ctx); err != nil {
		a.Stop()
		return nil, err
	}
	return a.Stop, nil
}

func newAgentCmd() *cobra.Command {
	var cfg agent.Config
	var logLevel string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent on a GPU host (joins once, then connects out only)",
		Long: `Runs the gpuaas node agent. On first start it generates an Ed25519 key under
--data-dir and joins the control plane with the single-use --join-token; later
starts reuse that identity (no token needed). It heartbeats, long-polls its
task queue and runs workloads on the local Docker engine.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			cfg.Logger = slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
			cfg.Version = buildinfo.Read().Version
			if cfg.JoinToken == "" {
				cfg.JoinToken = os.Getenv("GPUAAS_JOIN_TOKEN")
			}
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := a.Start(ctx); err != nil {
				a.Stop()
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "gpuaas agent running as node %s\n", a.NodeID())
			<-ctx.Done()
			a.Stop()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Server, "server", "", "control plane API URL (required)")
	f.StringVar(&cfg.JoinToken, "join-token", "", "single-use join token, needed on first start only (or GPUAAS_JOIN_TOKEN)")
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/gpuaas-agent", "where the node key, identity, task results and instance files live")
	f.StringVar(&cfg.Name, "name", "", "node name (default: the hostname)")
	f.StringVar(&cfg.HostAddress, "host-address", "127.0.0.1", "host-local address workload ports are published on")
	f.StringVar(&cfg.AdvertiseAddress, "advertise-address", "", "how operators reach this host for ssh -L tunnels to workload ports (default: the hostname)")
	f.DurationVar(&cfg.OrphanGrace, "orphan-grace", 10*time.Minute, "how long a gpuaas-labelled container of no known task, or a Compose project network or volume with no container left, lives before it is removed")
	f.DurationVar(&cfg.ImagePruneGrace, "image-prune-grace", agent.DefaultImagePruneGrace, "how long an image the agent pulled stays once no container uses it (its instances decommissioned) before it is removed")
	f.DurationVar(&cfg.ImageHoldMax, "image-hold-max", agent.DefaultImageHoldMax, "how long an image pulled for a run is kept, whatever --image-prune-grace says, while the run has not created its container (it comes late after a control-plane outage); past it, the image is pruned as usual")
	f.IntVar(&cfg.PollWait, "poll-wait", 60, "task long-poll wait in seconds (at most 60); queued tasks wake the poll at once, so a long wait only saves the control plane work")
	f.IntVar(&cfg.Concurrency, "concurrency", agent.DefaultConcurrency, "how many tasks run at once (the tasks of one instance run one at a time, in order)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
