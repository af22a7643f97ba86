package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuaas/gpuaas/client"
)

func init() { commandFactories = append(commandFactories, newInstanceCmd) }

func newInstanceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "instance",
		Short: "Launch, upgrade, roll back and decommission app instances",
		Long: `App instances run an entitled, published app version on one of the project's
allocations. Lifecycle requests answer at once with an operation; --wait follows
the project's event stream until it ends and exits non-zero when it fails.`,
	}
	projectFlag(cmd, true)
	cmd.AddCommand(newInstanceCreateCmd(), newInstanceListCmd(), newInstanceGetCmd(),
		newInstanceVersionCmd("upgrade", "Upgrade a running instance to another version (health-gated; reverts by itself if the new version does not become ready)"),
		newInstanceVersionCmd("rollback", "Roll a running instance back to a version it ran before"),
		newInstanceDecommissionCmd(), newInstanceEventsCmd(), newInstanceLogsCmd())
	addClientFlags(cmd)
	return cmd
}

// waitFlag adds --wait and, when set, follows the operation the request
// started, printing each event, and fails when the operation failed.
type waitFlag struct{ wait, asJSON bool }

func (w *waitFlag) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&w.wait, "wait", false, "follow the operation's progress on the event stream until it ends; exit non-zero if it fails")
	addJSONAlias(cmd, &w.asJSON)
}

func (w *waitFlag) finish(cmd *cobra.Command, api *client.Client, pid string, inst client.AppInstance) error {
	if !w.wait {
		return printOr(cmd, w.asJSON, inst, func(out io.Writer) error {
			_, err := fmt.Fprintf(out, "%s %s: %s (operation %s)\n", inst.ID, inst.AppSlug, inst.Status, inst.OperationID)
			return err
		})
	}
	out := cmd.ErrOrStderr()
	fmt.Fprintf(out, "%s: operation %s in progress\n", inst.ID, inst.OperationID)
	op, err := api.WaitOperation(cmd.Context(), pid, inst.ID, inst.OperationID, func(e client.Event, d client.AppInstanceEventData) {
		line := fmt.Sprintf("%s  %-36s %-15s %s", e.Time.Local().Format("15:04:05"), e.Type, d.Status, d.Version)
		if d.ReasonCode != "" {
			line += "  reason=" + d.ReasonCode
		}
		fmt.Fprintln(out, line)
		for _, l := range d.LogTail {
			fmt.Fprintln(out, "    | "+l)
		}
	})
	if err != nil {
		return err
	}
	final, err := api.GetAppInstance(cmd.Context(), pid, inst.ID)
	if err != nil {
		return err
	}
	if err := printOr(cmd, w.asJSON, final, func(out io.Writer) error { return printInstance(out, final) }); err != nil {
		return err
	}
	if op.State != "succeeded" {
		return fmt.Errorf("operation %s %s: %s", op.ID, op.State, op.Description)
	}
	return nil
}

// printInstance is the table form of one instance.
func printInstance(w io.Writer, i client.AppInstance) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\nname\t%s\napp\t%s %s\ndigest\t%s\nstatus\t%s\n", i.ID, i.DisplayName, i.AppSlug, i.Version, i.Digest, i.Status)
	if i.ReasonCode != "" {
		fmt.Fprintf(tw, "reason\t%s: %s\n", i.ReasonCode, i.ReasonMessage)
	}
	if h := i.Health; h.State != "" {
		line := h.State
		if h.Reason != "" {
			line += " (" + h.Reason + ")"
		}
		if h.LastHeartbeatAt != "" {
			line += ", last heartbeat " + h.LastHeartbeatAt
		}
		if h.HeartbeatTimeoutSeconds > 0 {
			line += fmt.Sprintf(", due every %d s", h.HeartbeatTimeoutSeconds)
		}
		fmt.Fprintf(tw, "health\t%s\n", line)
	}
	fmt.Fprintf(tw, "mode\t%s / %s (%s, %s)\nallocation\t%s on node %s\n", i.OperatingMode, i.ControlPlaneScope, i.TenantBoundaryMode,
		i.RuntimeBackend, i.TargetAllocationID, i.NodeID)
	if i.Access != nil {
		fmt.Fprintf(tw, "access\t%s\n", i.Access.Instructions)
	}
	return tw.Flush()
}

func newInstanceCreateCmd() *cobra.Command {
	var (
		in                        client.AppInstanceRequest
		config, placement, params string
		gpus, cpus, memGiB, port  int
		w                         waitFlag
	)
	cmd := &cobra.Command{
		Use:   "create APP_SLUG VERSION",
		Short: "Launch an app version on one of the project's allocations",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			in.AppSlug, in.Version = args[0], args[1]
			if in.DisplayName == "" {
				in.DisplayName = args[0]
			}
			for _, d := range []struct {
				flag, val string
				dst       *json.RawMessage
			}{{"config", config, &in.Config}, {"placement", placement, &in.PlacementIntent}, {"params", params, &in.Parameters}} {
				if d.val == "" {
					continue
				}
				raw, err := jsonArg(d.val)
				if err != nil {
					return fmt.Errorf("--%s: %w", d.flag, err)
				}
				*d.dst = raw
			}
			res := &client.LaunchResources{}
			set := false
			for _, r := range []struct {
				flag string
				v    int
				dst  **int
			}{{"gpus", gpus, &res.GPUCount}, {"cpus", cpus, &res.CPUCores}, {"memory-gib", memGiB, &res.MemoryGiB}, {"host-port", port, &res.HostPort}} {
				if cmd.Flags().Changed(r.flag) {
					v := r.v
					*r.dst, set = &v, true
				}
			}
			if set {
				in.Resources = res
			}
			inst, err := api.CreateAppInstance(cmd.Context(), pid, in)
			if err != nil {
				return err
			}
			return w.finish(cmd, api, pid, inst)
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.DisplayName, "name", "", "display name (default: the app slug)")
	f.StringVar(&in.OperatingMode, "operating-mode", "", "hint: tenant_dedicated or platform_managed (the server decides)")
	f.StringVar(&in.ControlPlaneScope, "control-plane-scope", "", "hint: project, tenant or platform (the server decides)")
	f.StringVar(&in.TargetAllocationID, "allocation", "", "allocation to run on (default: the first compatible one of the project)")
	f.StringVar(&config, "config", "", "config document: JSON, or @FILE")
	f.StringVar(&placement, "placement", "", "placement intent: JSON, or @FILE")
	f.StringVar(&params, "params", "", `launch parameters: JSON, or @FILE (e.g. {"pip_packages":["numpy==2.1.0"]})`)
	f.IntVar(&gpus, "gpus", 0, "GPU count")
	f.IntVar(&cpus, "cpus", 0, "CPU cores")
	f.IntVar(&memGiB, "memory-gib", 0, "memory in GiB")
	f.IntVar(&port, "host-port", 0, "host-local port of the endpoint")
	w.add(cmd)
	return cmd
}

// jsonArg reads a JSON flag value given inline or as @FILE.
func jsonArg(v string) (json.RawMessage, error) {
	b := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if b, err = os.ReadFile(name); err != nil {
			return nil, err
		}
	}
	if !json.Valid(b) {
		return nil, errors.New("not valid JSON")
	}
	return b, nil
}

func newInstanceListCmd() *cobra.Command {
	var (
		status string
		f      pageFlags
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the project's app instances",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			page, err := api.ListAppInstances(cmd.Context(), pid, status, f.limit, f.cursor)
			if err != nil {
				return err
			}
			return printPage(cmd, &f, client.CatalogPage[client.AppInstance]{Items: page.Items, NextCursor: page.NextCursor},
				"ID\tNAME\tAPP\tVERSION\tSTATUS\tHEALTH\tREASON", func(i client.AppInstance) string {
					return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", i.ID, i.DisplayName, i.AppSlug, i.Version, i.Status, i.Health.State, i.ReasonCode)
				})
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only instances in this state")
	f.add(cmd)
	return cmd
}

func newInstanceGetCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get INSTANCE_ID",
		Short: "Show an instance: effective values, status, reason, access instructions",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			inst, err := api.GetAppInstance(cmd.Context(), pid, args[0])
			if err != nil {
				return err
			}
			return printOr(cmd, asJSON, inst, func(out io.Writer) error { return printInstance(out, inst) })
		},
	}
	addJSONAlias(cmd, &asJSON)
	return cmd
}

func newInstanceVersionCmd(action, short string) *cobra.Command {
	var w waitFlag
	cmd := &cobra.Command{
		Use:   action + " INSTANCE_ID TARGET_VERSION",
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			act := api.UpgradeAppInstance
			if action == "rollback" {
				act = api.RollbackAppInstance
			}
			inst, err := act(cmd.Context(), pid, args[0], args[1])
			if err != nil {
				return err
			}
			return w.finish(cmd, api, pid, inst)
		},
	}
	w.add(cmd)
	return cmd
}

func newInstanceDecommissionCmd() *cobra.Command {
	var w waitFlag
	cmd := &cobra.Command{
		Use:   "decommission INSTANCE_ID",
		Short: "Tear an instance down; it is decommissioned once its node verifies nothing remains",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			inst, err := api.DecommissionAppInstance(cmd.Context(), pid, args[0])
			if err != nil {
				return err
			}
			return w.finish(cmd, api, pid, inst)
		},
	}
	w.add(cmd)
	return cmd
}

func newInstanceEventsCmd() *cobra.Command {
	var f pageFlags
	cmd := &cobra.Command{
		Use:   "events INSTANCE_ID",
		Short: "Show an instance's timeline",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			page, err := api.AppInstanceEvents(cmd.Context(), pid, args[0], f.limit, f.cursor)
			if err != nil {
				return err
			}
			return printPage(cmd, &f, client.CatalogPage[client.AppInstanceEvent]{Items: page.Items, NextCursor: page.NextCursor},
				"TIME\tEVENT\tSTATUS\tOPERATION\tCORRELATION", func(e client.AppInstanceEvent) string {
					return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", e.OccurredAt, e.EventType, e.Status, e.OperationID, e.CorrelationID)
				})
		},
	}
	f.add(cmd)
	return cmd
}

func newInstanceLogsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "logs INSTANCE_ID",
		Short: "Show the workload's last log lines (reported with a failure or a reverted upgrade)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			logs, err := api.AppInstanceLogs(cmd.Context(), pid, args[0])
			if err != nil {
				return err
			}
			return printOr(cmd, asJSON, logs, func(out io.Writer) error {
				for _, l := range logs.Lines {
					if _, err := fmt.Fprintln(out, l); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	addJSONAlias(cmd, &asJSON)
	return cmd
}
