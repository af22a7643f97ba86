package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/releases"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

func TestInferArtifact(t *testing.T) {
	for name, want := range map[string][3]string{
		"gpuaas-linux-amd64":            {"linux", "amd64", "cli"},
		"gpuaas-darwin-arm64":           {"darwin", "arm64", "cli"},
		"gpuaas-windows-amd64.exe":      {"windows", "amd64", "cli"},
		"gpuaas-agent-linux-arm64":      {"linux", "arm64", "agent"},
		"gpuaas_sdk-1.0.0.whl":          {"any", "any", "sdk"},
		"templates-http-app.tar.gz":     {"any", "any", "template"},
		"gpuaas-linux-amd64.tar.gz":     {"linux", "amd64", "cli"},
		"checksums-linux-notanarch.txt": {"any", "any", "cli"},
	} {
		goos, arch, kind := inferArtifact(name)
		if got := [3]string{goos, arch, string(kind)}; got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}

// gpuaas release publish/list/get/download against a real server, and
// gpuaas version --check before and after a newer release.
func TestReleaseCLI(t *testing.T) {
	t.Setenv(envConfigDir, t.TempDir())
	s := servertest.Start(t, store.SQLite)
	admin := []string{"--api-url", s.URL, "--token", s.Admin().Token}
	anon := []string{"--api-url", s.URL}
	run := func(conn []string, args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, append(args, conn...)...)
		if err != nil {
			t.Fatalf("gpuaas %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	dir := t.TempDir()
	files := map[string]string{"gpuaas-linux-amd64": "linux build", "gpuaas-agent-linux-arm64": "agent build", ".hidden": "skipped"}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out := run(admin, "release", "publish", dir, "--version", "1.0.0", "-o", "json"); !strings.Contains(out, `"version": "1.0.0"`) ||
		!strings.Contains(out, `"kind": "agent"`) || strings.Contains(out, "hidden") {
		t.Fatalf("publish: %s", out)
	}
	if _, errOut, err := runCLI(t, append([]string{"release", "publish", dir, "--version", "1.0.0"}, admin...)...); err == nil || !strings.Contains(errOut+err.Error(), "immutable") {
		t.Fatalf("publishing again: %v %s", err, errOut)
	}
	if out := run(anon, "release", "list", "-o", "table"); !strings.Contains(out, "1.0.0") {
		t.Fatalf("list: %s", out)
	}
	if out := run(anon, "release", "get", "1.0.0", "-o", "json"); !strings.Contains(out, "gpuaas-linux-amd64") {
		t.Fatalf("get: %s", out)
	}
	dest := filepath.Join(t.TempDir(), "gpuaas")
	if out := run(anon, "release", "download", "1.0.0", "gpuaas-linux-amd64", "--file", dest, "-o", "json"); !strings.Contains(out, "sha256:") {
		t.Fatalf("download: %s", out)
	}
	if b, err := os.ReadFile(dest); err != nil || string(b) != "linux build" {
		t.Fatalf("downloaded %q (%v)", b, err)
	}
	if _, _, err := runCLI(t, append([]string{"release", "download", "1.0.0", "nope", "--file", dest}, anon...)...); err == nil {
		t.Fatal("downloading a missing artifact succeeded")
	}

	if out := run(anon, "version", "--check", "-o", "json"); !strings.Contains(out, "cannot be compared") {
		t.Fatalf("devel check: %s", out)
	}
	if out := run(anon, "version", "--check", "--compare-as", "1.0.0", "-o", "json"); !strings.Contains(out, `"update_available": false`) || !strings.Contains(out, "up to date") {
		t.Fatalf("current check: %s", out)
	}
	if err := os.WriteFile(filepath.Join(dir, "gpuaas-linux-amd64"), []byte("newer build"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(admin, "release", "publish", dir, "--version", "1.10.0")
	if out := run(anon, "version", "--check", "--compare-as", "1.2.0", "-o", "json"); !strings.Contains(out, `"update_available": true`) || !strings.Contains(out, `"latest": "1.10.0"`) {
		t.Fatalf("newer check: %s", out)
	}
	if !releases.ValidVersion("1.10.0") {
		t.Fatal("version")
	}
}
