package cli

import (
	"encoding/json"
	"testing"

	"github.com/gpuaas/gpuaas/client"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1048576, "500MB": 500_000_000, "10GiB": 10 << 30, "10gib": 10 << 30,
		"1.5 TB": 1_500_000_000_000, "2KiB": 2048, "7b": 7, "1.5GiB": 3 << 29,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "GiB", "10 parsecs", "1.2.3GB", "9999999PiB", "99999999999999999999"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

// `project storage set` changes only the quota it names (the request
// replaces both, so the CLI carries the other over), and --clear-… puts
// one back to the platform's default.
func TestProjectStorageCommands(t *testing.T) {
	c := loginCLI(t)
	show := func(args ...string) client.ProjectStorage {
		t.Helper()
		var v client.ProjectStorage
		if err := json.Unmarshal([]byte(c.must(append(args, "-o", "json")...)), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	v := show("project", "storage", "set", "--blob-quota", "10GiB")
	if v.Blobs.QuotaBytes == nil || *v.Blobs.QuotaBytes != 10<<30 || v.Blobs.QuotaSource != "project" || v.Registry.QuotaSource != "platform" {
		t.Fatalf("after --blob-quota 10GiB: %+v", v)
	}
	v = show("project", "storage", "set", "--registry-quota", "1.5GB")
	if v.Blobs.QuotaBytes == nil || *v.Blobs.QuotaBytes != 10<<30 || v.Registry.QuotaBytes == nil || *v.Registry.QuotaBytes != 1_500_000_000 {
		t.Fatalf("setting the registry quota lost the blob quota: %+v", v)
	}
	v = show("project", "storage", "set", "--clear-blob-quota")
	if v.Blobs.QuotaSource != "platform" || v.Blobs.QuotaBytes != nil || v.Registry.QuotaSource != "project" {
		t.Fatalf("after --clear-blob-quota: %+v", v)
	}
	if got := show("project", "storage"); got.Registry.QuotaBytes == nil || *got.Registry.QuotaBytes != 1_500_000_000 {
		t.Fatalf("project storage: %+v", got)
	}
	for _, args := range [][]string{{"--blob-quota", "lots"}, {"--blob-quota", "1GB", "--clear-blob-quota"}, {}} {
		if code, _, stderr := c.run("", append([]string{"project", "storage", "set"}, args...)...); code != exitUsage {
			t.Fatalf("project storage set %v: exit %d, want %d\n%s", args, code, exitUsage, stderr)
		}
	}
}
