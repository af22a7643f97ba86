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
		Short: "Launch, upgrade, roll back and decommission app instances, and manage their members",
		Long: `App instances run an entitled, published app version on one of the project's
allocations. Lifecycle requests answer at once with an operation; --wait follows
the project's event stream until it ends and exits non-zero when it fails.
A cluster app's instance can also be given members (workers, heads, nodes):
see gpuaas instance member. A shared instance is used by the projects attached
to it: see gpuaas instance attach.`,
	}
	projectFlag(cmd, true)
	cmd.AddCommand(newInstanceCreateCmd(), newInstanceListCmd(), newInstanceGetCmd(),
		newInstanceVersionCmd("upgrade", "Upgrade a running instance to another version (health-gated; reverts by itself if the new version does not become ready)"),
		newInstanceVersionCmd("rollback", "Roll a running instance back to a version it ran before"),
		newInstanceDecommissionCmd(), newInstanceEventsCmd(), newInstanceLogsCmd(), newInstanceMemberCmd(),
		newInstanceAttachCmd(), newInstanceDetachCmd(), newInstanceAttachmentsCmd())
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
	op, err := followOperation(cmd, api, pid, inst.ID, inst.OperationID)
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

// followOperation prints an operation's events on stderr as they come,
// until the operation ends, and returns it as it ended.
func followOperation(cmd *cobra.Command, api *client.Client, pid, instanceID, operationID string) (client.Operation, error) {
	out := cmd.ErrOrStderr()
	fmt.Fprintf(out, "%s: operation %s in progress\n", instanceID, operationID)
	return api.WaitOperation(cmd.Context(), pid, instanceID, operationID, func(e client.Event, d client.AppInstanceEventData) {
		line := fmt.Sprintf("%s  %-36s %-15s %s", e.Time.Local().Format("15:04:05"), e.Type, d.Status, d.Version)
		// A member event names its member (the client's event data does
		// not carry it).
		var m struct {
			Member *struct{ Name, Role, Status string } `json:"member"`
		}
		if json.Unmarshal(e.Data, &m) == nil && m.Member != nil {
			name := m.Member.Name
			if name == "" {
				name = m.Member.Role
			}
			line += fmt.Sprintf("  member=%s (%s)", name, m.Member.Status)
		}
		if d.ReasonCode != "" {
			line += "  reason=" + d.ReasonCode
		}
		fmt.Fprintln(out, line)
		for _, l := range d.LogTail {
			fmt.Fprintln(out, "    | "+l)
		}
	})
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

func newInstanceMemberCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "member",
		Aliases: []string{"members"},
		Short:   "List, add, remove and recover the members of a cluster app's instance",
		Long: `Members are the workloads an instance runs: its own workload, and the members
(workers, heads, nodes) added to a running instance whose app version declares
them (runtime_profile.members). Each member runs as its own workload on an
allocation of the project, on any node. Add, remove and recover answer at once
with an operation; --wait follows it until it ends and exits non-zero when it
fails.`,
	}
	cmd.AddCommand(newInstanceMemberListCmd(), newInstanceMemberAddCmd(),
		newInstanceMemberActionCmd("remove", "Remove a member that was added (not the instance's own workload)",
			`Removes an added member: its workload is removed on its node, and the removal
is verified there before the operation succeeds. Asynchronous: use --wait to
follow it. The instance's own workload goes only with the instance (decommission).`),
		newInstanceMemberActionCmd("recover", "Redeploy a failed member where it was",
			`Redeploys a failed member on its node and allocation. Only a failed member can
be recovered. Asynchronous: use --wait to follow it.`))
	return cmd
}

// memberHeader and memberRow are the table form of members.
const memberHeader = "ID\tNAME\tROLE\tADDED\tSTATUS\tREASON\tNODE"

func memberRow(m client.AppInstanceMember) string {
	name, added := m.Name, "no"
	if name == "" {
		name = m.WorkloadName
	}
	if m.Added {
		added = "yes"
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", m.ID, name, m.Role, added, m.Status, m.ReasonCode, m.NodeID)
}

// printMemberOperation is the table form of a member request's answer: the
// operation, then the members it acts on.
func printMemberOperation(w io.Writer, mo client.MemberOperation) error {
	op := mo.Operation
	if op.ID == "" {
		op.ID = mo.OperationID
	}
	line := fmt.Sprintf("operation %s %s", op.ID, op.State)
	if op.Description != "" {
		line += ": " + op.Description
	}
	if op.ReasonCode != "" {
		line += " (reason " + op.ReasonCode + ")"
	}
	fmt.Fprintln(w, line)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, memberHeader)
	for _, m := range mo.Members {
		fmt.Fprintln(tw, memberRow(m))
	}
	return tw.Flush()
}

func newInstanceMemberListCmd() *cobra.Command {
	var f pageFlags
	cmd := &cobra.Command{
		Use:   "list INSTANCE_ID",
		Short: "List an instance's members: its own workload and added members (removed ones too)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			page, err := api.ListAppInstanceMembers(cmd.Context(), pid, args[0], f.options())
			if err != nil {
				return err
			}
			return printPage(cmd, &f, page, memberHeader, memberRow)
		},
	}
	f.add(cmd)
	return cmd
}

func newInstanceMemberAddCmd() *cobra.Command {
	var (
		in client.AddMembersRequest
		w  waitFlag
	)
	cmd := &cobra.Command{
		Use:   "add INSTANCE_ID --role ROLE",
		Short: "Add members (workers, heads, nodes) to a running instance whose version declares them",
		Long: `Adds --count members of --role to a running instance. Its app version must
declare members (runtime_profile.members) and allow the role. Each member runs the
instance's version as its own workload on --allocation (default: the instance's
own allocation). Asynchronous: the answer names the operation and the new
members, which are deploying; use --wait to follow them until they run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			mo, err := api.AddAppInstanceMembers(cmd.Context(), pid, args[0], in)
			if err != nil {
				return err
			}
			return w.finishMembers(cmd, api, pid, args[0], mo)
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.Role, "role", "", "role of the new members, one the version allows (e.g. worker)")
	f.StringVar(&in.AllocationID, "allocation", "", "allocation of the project to run them on (default: the instance's own)")
	f.IntVar(&in.Count, "count", 1, "how many members to add")
	w.add(cmd)
	return cmd
}

func newInstanceMemberActionCmd(action, short, long string) *cobra.Command {
	var w waitFlag
	cmd := &cobra.Command{
		Use:   action + " INSTANCE_ID MEMBER_ID",
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			act := api.RemoveAppInstanceMember
			if action == "recover" {
				act = api.RecoverAppInstanceMember
			}
			mo, err := act(cmd.Context(), pid, args[0], args[1])
			if err != nil {
				return err
			}
			return w.finishMembers(cmd, api, pid, args[0], mo)
		},
	}
	w.add(cmd)
	return cmd
}

// finishMembers is finish for a member request: without --wait it prints
// the operation and its members as answered; with --wait it follows the
// operation, then prints it and its members as they ended, and fails when
// the operation failed.
func (w *waitFlag) finishMembers(cmd *cobra.Command, api *client.Client, pid, instanceID string, mo client.MemberOperation) error {
	if mo.AppInstanceID != "" {
		instanceID = mo.AppInstanceID
	}
	if w.wait {
		op, err := followOperation(cmd, api, pid, instanceID, mo.OperationID)
		if err != nil {
			return err
		}
		mo.Operation = op
		if mo.Members, err = membersNow(cmd, api, pid, instanceID, mo.Members); err != nil {
			return err
		}
	}
	if err := printOr(cmd, w.asJSON, mo, func(out io.Writer) error { return printMemberOperation(out, mo) }); err != nil {
		return err
	}
	if w.wait && mo.Operation.State != "succeeded" {
		return fmt.Errorf("operation %s %s: %s", mo.Operation.ID, mo.Operation.State, mo.Operation.Description)
	}
	return nil
}

// membersNow reads the instance's members again and returns ms as they are
// now (a member no longer listed stays as it was).
func membersNow(cmd *cobra.Command, api *client.Client, pid, instanceID string, ms []client.AppInstanceMember) ([]client.AppInstanceMember, error) {
	now := map[string]client.AppInstanceMember{}
	for o := (client.CatalogListOptions{Limit: 500}); ; {
		page, err := api.ListAppInstanceMembers(cmd.Context(), pid, instanceID, o)
		if err != nil {
			return nil, err
		}
		for _, m := range page.Items {
			now[m.ID] = m
		}
		if page.NextCursor == "" || len(page.Items) == 0 {
			break
		}
		o.Cursor = page.NextCursor
	}
	out := make([]client.AppInstanceMember, len(ms))
	for i, m := range ms {
		if n, ok := now[m.ID]; ok {
			m = n
		}
		out[i] = m
	}
	return out, nil
}

// sharedHelp is what the attach verbs say of shared instances.
const sharedHelp = `A tenant-shared instance (launched with control_plane_scope tenant) belongs to
its org, a platform-managed one to the platform; either is used by the projects
attached to it, whose members read it and open its UI through their own
project. INSTANCE_ID is named in its home project (--project or
GPUAAS_PROJECT_ID), the project it was launched in. Attaching and detaching
need an org-level role (a platform role for a platform-managed instance); an
instance of one project (control_plane_scope project) is shared with no other.`

func newInstanceAttachCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "attach INSTANCE_ID PROJECT_ID",
		Short: "Let another project use a shared instance (tenant-shared or platform-managed)",
		Long: sharedHelp + `

Attaches PROJECT_ID (an id or slug) to the instance: a project of the
instance's org, or of any org for a platform-managed instance. Attaching again
changes nothing.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			target, err := resolveProject(cmd.Context(), api, args[1])
			if err != nil {
				return err
			}
			a, err := api.AttachAppInstanceProject(cmd.Context(), pid, args[0], target)
			if err != nil {
				return err
			}
			return printOr(cmd, asJSON, a, func(out io.Writer) error {
				_, err := fmt.Fprintf(out, "project %s uses instance %s (attached by %s)\n", a.ProjectID, a.AppInstanceID, a.AttachedBy)
				return err
			})
		},
	}
	addJSONAlias(cmd, &asJSON)
	return cmd
}

func newInstanceDetachCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "detach INSTANCE_ID PROJECT_ID",
		Short: "Take a project's use of a shared instance away",
		Long: sharedHelp + `

Detaches PROJECT_ID (an id or slug): its members stop seeing the instance at once.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			target, err := resolveProject(cmd.Context(), api, args[1])
			if err != nil {
				return err
			}
			if err := api.DetachAppInstanceProject(cmd.Context(), pid, args[0], target); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Detached project %s from instance %s\n", target, args[0])
			return printResult(cmd, map[string]any{"app_instance_id": args[0], "project_id": target, "detached": true})
		},
	}
}

func newInstanceAttachmentsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "attachments INSTANCE_ID",
		Short: "List the projects attached to a shared instance",
		Long:  sharedHelp,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			page, err := api.ListAppInstanceAttachments(cmd.Context(), pid, args[0])
			if err != nil {
				return err
			}
			return printOr(cmd, asJSON, page, func(out io.Writer) error {
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PROJECT\tORG\tATTACHED BY\tATTACHED AT")
				for _, a := range page.Items {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.ProjectID, a.OrgID, a.AttachedBy, a.CreatedAt)
				}
				return flushWithCursor(tw, page.NextCursor)
			})
		},
	}
	addJSONAlias(cmd, &asJSON)
	return cmd
}
