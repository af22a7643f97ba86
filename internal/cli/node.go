package cli

import (
	"fmt"

	"github.com/gpuaas/gpuaas/client"
	"github.com/spf13/cobra"
)

func init() { commandFactories = append(commandFactories, newNodeCmd, newAllocationCmd) }

func newNodeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "GPU hosts running the gpuaas agent (platform admins)"}
	addClientFlags(cmd)
	var state string
	list := &cobra.Command{Use: "list", Short: "List nodes", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		c, err := apiClient(cmd)
		if err != nil {
			return err
		}
		ns, next, err := c.ListNodes(cmd.Context(), state, "")
		if err != nil {
			return err
		}
		return printJSON(cmd, map[string]any{"items": ns, "next_cursor": next})
	}}
	list.Flags().StringVar(&state, "state", "", "only nodes in this state (joining, ready, down, draining, removed)")
	get := &cobra.Command{Use: "get NODE_ID", Short: "One node with its inventory, GPUs and workloads", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			n, err := c.GetNode(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd, n)
		}}
	var desc string
	var ttl int
	jt := &cobra.Command{Use: "join-token", Short: "Create a single-use join token for one new host (shown once)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			t, err := c.CreateNodeJoinToken(cmd.Context(), desc, ttl)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "join token %s expires at %s; it works once and is not shown again\n", t.ID, t.ExpiresAt)
			return printJSON(cmd, t)
		}}
	jt.Flags().StringVar(&desc, "description", "", "what the token is for (recorded in the audit log)")
	jt.Flags().IntVar(&ttl, "ttl-seconds", 0, "lifetime of the token (default 900)")
	cmd.AddCommand(list, get, jt)
	return cmd
}

func newAllocationCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "allocation", Short: "GPU allocations of a project (create/release: platform admins)"}
	addClientFlags(cmd)
	projectFlag(cmd, true)
	var state string
	list := &cobra.Command{Use: "list", Short: "List the project's allocations", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		p, c, err := projectClient(cmd)
		if err != nil {
			return err
		}
		as, next, err := c.ListProjectAllocations(cmd.Context(), p, state, "")
		if err != nil {
			return err
		}
		return printJSON(cmd, map[string]any{"items": as, "next_cursor": next})
	}}
	list.Flags().StringVar(&state, "state", "", "only allocations in this state")
	get := &cobra.Command{Use: "get ALLOCATION_ID", Short: "One allocation", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		p, c, err := projectClient(cmd)
		if err != nil {
			return err
		}
		a, err := c.GetProjectAllocation(cmd.Context(), p, args[0])
		if err != nil {
			return err
		}
		return printJSON(cmd, a)
	}}
	var in client.AllocationRequest
	var gpus int
	create := &cobra.Command{Use: "create", Short: "Place an allocation on a ready node with enough free matching GPUs", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, c, err := projectClient(cmd)
			if err != nil {
				return err
			}
			in.ProjectID = p
			if cmd.Flags().Changed("gpus") {
				in.GPUCount = &gpus
			}
			a, err := c.CreateAllocation(cmd.Context(), in)
			if err != nil {
				return err
			}
			return printJSON(cmd, a)
		}}
	f := create.Flags()
	f.StringVar(&in.SKU, "sku", "", "SKU such as h100-80gb.1x (its .<N>x suffix gives the GPU count)")
	f.StringVar(&in.Shape, "shape", "", "gpu_slice (default) or baremetal")
	f.IntVar(&gpus, "gpus", 0, "GPUs of a gpu_slice (0: CPU only); overrides the SKU suffix")
	f.StringVar(&in.GPUModel, "gpu-model", "", "exact GPU model, e.g. \"NVIDIA H100 80GB HBM3\"")
	f.StringVar(&in.GPUVendor, "gpu-vendor", "", "GPU vendor, e.g. nvidia")
	f.Int64Var(&in.MinGPUMemoryMiB, "min-gpu-memory-mib", 0, "minimum memory per GPU")
	f.StringVar(&in.NodeID, "node", "", "pin to this node id")
	release := &cobra.Command{Use: "release ALLOCATION_ID", Short: "Release an allocation (its GPUs return to the node)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			a, err := c.ReleaseAllocation(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd, a)
		}}
	cmd.AddCommand(list, get, create, release)
	return cmd
}
