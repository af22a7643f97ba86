package cli

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
)

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := NewRoot(&out, &errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func TestManifestValidateOffline(t *testing.T) {
	t.Setenv(envConfigDir, t.TempDir())
	out, _, err := runCLI(t, "manifest", "validate", filepath.Join("..", "..", "examples", "manifests", "jupyter-cuda-dev.json"), "-o", "table")
	if err != nil || !strings.Contains(out, "ok: jupyter-cuda-dev 1.4.2") {
		t.Fatalf("valid sample: %v %q", err, out)
	}
	bad := filepath.Join("..", "manifest", "testdata", "invalid", "tag-instead-of-digest.json")
	out, _, err = runCLI(t, "manifest", "validate", bad, "-o", "table")
	var code exitCode
	if !errors.As(err, &code) || code != 1 || !strings.Contains(out, bad+":7: /runtime_profile/image_ref:") {
		t.Fatalf("broken manifest: %v %q", err, out)
	}
	// register validates offline first: no server is contacted.
	_, errOut, err := runCLI(t, "manifest", "register", bad, "--api-url", "http://127.0.0.1:1")
	if !errors.As(err, &code) || !strings.Contains(errOut, "/runtime_profile/image_ref") {
		t.Fatalf("register of a broken manifest: %v %q", err, errOut)
	}
}

func TestCatalogCLI(t *testing.T) {
	t.Setenv(envConfigDir, t.TempDir())
	s := servertest.Start(t, store.SQLite)
	s.App.API.Catalog.SetArtifactGate(nil)
	conn := []string{"--api-url", s.URL, "--token", s.Admin().Token}
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, append(args, conn...)...)
		if err != nil {
			t.Fatalf("gpuaas %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	file := filepath.Join("..", "..", "examples", "manifests", "slurm-reference.yaml")
	if out := run("manifest", "register", file); !strings.Contains(out, "24.05.0") || !strings.Contains(out, "draft") {
		t.Fatalf("register: %q", out)
	}
	if out := run("manifest", "register", file); !strings.Contains(out, "unchanged") {
		t.Fatalf("re-register: %q", out)
	}
	if out := run("app", "versions", "slurm-reference"); !strings.Contains(out, "draft") {
		t.Fatalf("versions: %q", out)
	}
	_, errOut, err := runCLI(t, append([]string{"app", "publish", "slurm-reference", "24.05.0", "--reason", "ok"}, conn...)...)
	if err == nil || !strings.Contains(err.Error(), "artifact registry is not configured") {
		t.Fatalf("publish without registry: %v %q", err, errOut)
	}
	s.App.API.Catalog.SetArtifactGate(readyGate{})
	if out := run("app", "publish", "slurm-reference", "24.05.0", "--reason", "artifacts verified"); !strings.Contains(out, "published") {
		t.Fatalf("publish: %q", out)
	}
	pid := s.Creds.ProjectID
	run("app", "entitle", "slurm-reference", "--project", pid, "--scope", "project")
	if out := run("app", "catalog", "--project", pid); !strings.Contains(out, "slurm-reference") {
		t.Fatalf("project catalog: %q", out)
	}
	// The effective values print; the exit status is create's answer: an
	// external worker runs slurm versions (they declare its contract), but
	// the project has no allocation to place the instance on.
	out, _, err := runCLI(t, append([]string{"app", "preview", "slurm-reference", "24.05.0", "--project", pid, "--placement", `{"controller_allocation_ids":["a"]}`}, conn...)...)
	if !strings.Contains(out, `"tenant_boundary_mode": "project_isolated"`) || err == nil || !strings.Contains(err.Error(), "would be refused") || !strings.Contains(describeError(nil, err), "/target_allocation_id") {
		t.Fatalf("preview: %v %q", err, out)
	}
	_, _, err = runCLI(t, append([]string{"app", "preview", "slurm-reference", "24.05.0", "--project", pid, "--scope", "tenant"}, conn...)...)
	if err == nil || !strings.Contains(describeError(nil, err), "/control_plane_scope") {
		t.Fatalf("preview refused: %v", err)
	}
	if out := run("app", "list"); !strings.Contains(out, "slurm-reference") {
		t.Fatalf("list: %q", out)
	}
}

// readyGate stands in for the artifact registry: every artifact is ready.
type readyGate struct{}

func (readyGate) VersionArtifactsReady(context.Context, storage.Tx, string, string, []manifest.Artifact) error {
	return nil
}
