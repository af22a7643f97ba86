package cli

import (
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

func TestBillingCLI(t *testing.T) {
	t.Setenv(envConfigDir, t.TempDir())
	s := servertest.Start(t, store.SQLite)
	conn := []string{"--api-url", s.URL, "--token", s.Admin().Token}
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, append(args, conn...)...)
		if err != nil {
			t.Fatalf("gpuaas %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	pid := s.Creds.ProjectID
	if out := run("billing", "price", "add", "--sku", "h100-80gb.1x", "--price-micros", "2500000"); !strings.Contains(out, `"per_quantity": 3600`) {
		t.Fatalf("price add: %s", out)
	}
	if out := run("billing", "price", "list", "-o", "table"); !strings.Contains(out, "h100-80gb.1x") || !strings.Contains(out, "2.500000 USD") {
		t.Fatalf("price list: %s", out)
	}
	if out := run("billing", "budget", "set", "--project", pid, "--gpu-quota", "2"); !strings.Contains(out, `"gpu_quota": 2`) ||
		!strings.Contains(out, `"spend_limit_micros": null`) {
		t.Fatalf("budget set: %s", out)
	}
	if out := run("usage", "--project", pid, "-o", "table"); !strings.HasPrefix(out, "START") {
		t.Fatalf("usage: %s", out)
	}
	if out := run("usage", "--project", pid, "--csv"); !strings.HasPrefix(out, "id,org_id,project_id") {
		t.Fatalf("usage csv: %s", out)
	}
	if out := run("billing", "ledger", "--project", pid, "-o", "table"); !strings.HasPrefix(out, "ID") {
		t.Fatalf("ledger: %s", out)
	}
	if _, _, err := runCLI(t, append([]string{"usage", "--source", "bogus"}, conn...)...); err == nil || !strings.Contains(err.Error(), "usage_source") {
		t.Fatalf("a bad filter: %v", err)
	}
}
