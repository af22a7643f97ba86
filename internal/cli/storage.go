package cli

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/bytesize"
	"github.com/spf13/cobra"
)

// newProjectStorageCmd is `gpuaas project storage`: the project's blob
// and registry quotas with what it uses, and `set` for platform admins.
func newProjectStorageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "storage",
		Short: "Show the project's blob and registry storage quotas and use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			project, c, err := projectClient(cmd)
			if err != nil {
				return err
			}
			v, err := c.GetProjectStorage(cmd.Context(), project)
			if err != nil {
				return err
			}
			return printResult(cmd, v)
		},
	}
	var blob, registry string
	var clearBlob, clearRegistry bool
	set := &cobra.Command{
		Use:   "set",
		Short: "Set or clear the project's own storage quotas (platform admins)",
		Long: `Set or clear the project's own storage quotas (platform admins).

Sizes take units: 500MB, 10GiB, 1.5TB (B, KB, MB, GB, TB: powers of 1000;
KiB, MiB, GiB, TiB: powers of 1024); 0 means nothing more may be stored.
--clear-… puts a quota back to the platform's default. A quota not named
is left as it is. A quota below what the project holds is accepted: what
it holds stays, and its next uploads or pushes are refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var blobBytes, registryBytes *int64
			var err error
			if blobBytes, err = sizeFlag(cmd, "blob-quota", blob, clearBlob); err != nil {
				return err
			}
			if registryBytes, err = sizeFlag(cmd, "registry-quota", registry, clearRegistry); err != nil {
				return err
			}
			if !cmd.Flags().Changed("blob-quota") && !clearBlob && !cmd.Flags().Changed("registry-quota") && !clearRegistry {
				return usageError{"name a quota: --blob-quota SIZE, --registry-quota SIZE, --clear-blob-quota or --clear-registry-quota"}
			}
			project, c, err := projectClient(cmd)
			if err != nil {
				return err
			}
			// The request replaces both overrides: the one not named keeps
			// the value it has now.
			cur, err := c.GetProjectStorage(cmd.Context(), project)
			if err != nil {
				return err
			}
			in := client.ProjectStorageQuotaInput{BlobQuotaBytes: blobBytes, RegistryQuotaBytes: registryBytes}
			if !cmd.Flags().Changed("blob-quota") && !clearBlob && cur.Blobs.QuotaSource == "project" {
				in.BlobQuotaBytes = cur.Blobs.QuotaBytes
			}
			if !cmd.Flags().Changed("registry-quota") && !clearRegistry && cur.Registry.QuotaSource == "project" {
				in.RegistryQuotaBytes = cur.Registry.QuotaBytes
			}
			// If-Match from the read: an override another admin set
			// between the read and this PUT is not silently put back.
			var opts []client.RequestOption
			if cur.ETag != "" {
				opts = append(opts, client.WithIfMatch(cur.ETag))
			}
			v, err := c.PutProjectStorageQuota(cmd.Context(), project, in, opts...)
			var apiErr *client.APIError
			if errors.As(err, &apiErr) && apiErr.Status == http.StatusPreconditionFailed {
				// The server's message speaks of ETags; here the next step
				// is simply this command again, which reads afresh.
				apiErr.Message = "the project's storage quotas changed (another admin?) while this command ran, so nothing was changed: " +
					"see them with gpuaas project storage, then run gpuaas project storage set again"
			}
			if err != nil {
				return err
			}
			return printResult(cmd, v)
		},
	}
	set.Flags().StringVar(&blob, "blob-quota", "", "bytes of blob storage the project may hold (e.g. 10GiB)")
	set.Flags().StringVar(&registry, "registry-quota", "", "bytes the project may hold in the embedded registry (e.g. 50GiB)")
	set.Flags().BoolVar(&clearBlob, "clear-blob-quota", false, "use the platform's default blob quota (--project-blob-quota-bytes)")
	set.Flags().BoolVar(&clearRegistry, "clear-registry-quota", false, "use the platform's default registry quota (--project-registry-quota-bytes)")
	cmd.AddCommand(set)
	projectFlag(cmd, true)
	return cmd
}

// sizeFlag reads a size flag, or nil when it is cleared or not given.
func sizeFlag(cmd *cobra.Command, name, value string, clear bool) (*int64, error) {
	if !cmd.Flags().Changed(name) {
		return nil, nil
	}
	if clear {
		return nil, usageError{fmt.Sprintf("--%s and --clear-%s cannot go together", name, name)}
	}
	n, err := bytesize.Parse(value)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--%s %q: %v", name, value, err)}
	}
	return &n, nil
}
