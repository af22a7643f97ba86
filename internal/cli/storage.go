package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpuaas/gpuaas/client"
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
			v, err := c.PutProjectStorageQuota(cmd.Context(), project, in)
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
	n, err := parseSize(value)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--%s %q: %v", name, value, err)}
	}
	return &n, nil
}

var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12, "p": 1e15, "pb": 1e15,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30,
	"ti": 1 << 40, "tib": 1 << 40, "pi": 1 << 50, "pib": 1 << 50,
}

// parseSize reads a byte count as people type it: 1048576, 500MB, 10GiB,
// 1.5 TB (decimal units are powers of 1000, binary ones of 1024; the
// unit's case does not matter).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("want a number of bytes with an optional unit, such as 500MB or 10GiB")
	}
	if mult == 1 && !strings.Contains(num, ".") {
		return strconv.ParseInt(num, 10, 64)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("want a number of bytes with an optional unit, such as 500MB or 10GiB")
	}
	n := math.Round(f * mult)
	if n >= math.MaxInt64 {
		return 0, fmt.Errorf("larger than %d bytes", int64(math.MaxInt64))
	}
	return int64(n), nil
}
