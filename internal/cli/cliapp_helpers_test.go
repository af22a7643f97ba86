package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest/fleet"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// cliApps is the CLI run in-process against a real server, logged in as
// the platform admin, with GPUAAS_PROJECT_ID set to the admin's project.
// From newCLIApps it also has a real in-process agent (on a fake driver),
// ready, to run the apps that publish pushes through the CLI.
type cliApps struct {
	s   *servertest.Server
	run func(stdin string, args ...string) (int, string, string)
	// must runs the CLI with no stdin and fails the test unless it exits 0;
	// it returns stdout.
	must func(args ...string) string

	f   *fleet.Fleet    // newCLIApps only: one agent, ready
	ctx context.Context // newCLIApps only: a minute from the fleet's start, for waits on it
	dir string          // newCLIApps only: where publish writes its tarballs and manifests
}

// loginCLI starts a server and logs the CLI in as its admin. It sets the
// process environment, so its test cannot be parallel.
func loginCLI(t *testing.T) *cliApps {
	t.Helper()
	s := servertest.Start(t, store.SQLite)
	run := exitRunner(t, s)
	t.Setenv("GPUAAS_PROJECT_ID", s.Creds.ProjectID)
	c := &cliApps{s: s, run: run}
	c.must = func(args ...string) string {
		t.Helper()
		code, out, stderr := run("", args...)
		if code != exitOK {
			t.Fatalf("gpuaas %s: exit %d\n%s", strings.Join(args, " "), code, stderr)
		}
		return out
	}
	if code, _, stderr := run(s.Creds.AdminPassword+"\n", "login", "--email", s.Creds.AdminEmail, "--password-stdin"); code != exitOK {
		t.Fatalf("login: %s", stderr)
	}
	return c
}

// newCLIApps is loginCLI with a one-agent fleet, waited on until ready.
func newCLIApps(t *testing.T) *cliApps {
	t.Helper()
	c := loginCLI(t)
	c.f = fleet.Start(t, c.s, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	c.ctx = ctx
	c.f.Must(c.f.WaitReady(ctx))
	c.dir = t.TempDir()
	return c
}

// publish makes app slug, version 1.0.0, launchable through the CLI: a
// random image is pushed, verified and promoted staged, canary, active;
// a manifest naming it is registered, and the version published and
// entitled. The manifest launches the image on one project's
// (tenant_dedicated, control_plane_scope project) private port 8080,
// ready on /healthz; edit, unless nil, changes it before it is
// registered (its "supported_modes" and "runtime_profile" are
// map[string]any). It returns the pushed artifact.
func (c *cliApps) publish(t *testing.T, slug string, edit func(manifest map[string]any)) client.AppArtifact {
	t.Helper()
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(c.dir, slug+".tar")
	ref, err := name.ParseReference("example.com/" + slug + ":local")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(tarPath, ref, img); err != nil {
		t.Fatal(err)
	}
	var art client.AppArtifact
	if err := json.Unmarshal([]byte(c.must("artifact", "push", tarPath, "--app", slug, "--version", "1.0.0", "-o", "json")), &art); err != nil {
		t.Fatal(err)
	}
	c.must("artifact", "verify", art.ID, "--reason", "ci")
	for _, st := range []string{"staged", "canary", "active"} {
		c.must("artifact", "promote", art.ID, "--to", st, "--reason", "rollout")
	}
	host := strings.TrimPrefix(strings.TrimPrefix(c.s.URL, "http://"), "https://")
	manifest := map[string]any{
		"slug": slug, "display_name": slug, "version": "1.0.0", "runtime_backend": "launchable_oci",
		"supported_modes": map[string]any{"operating_modes": []string{"tenant_dedicated"}, "control_plane_scopes": []string{"project"}},
		"compatibility":   map[string]any{"requires_capacity_shape": []string{"gpu_slice", "baremetal"}, "supported_accelerators": []string{"nvidia", "cpu"}},
		"artifacts":       []map[string]any{{"name": "runtime", "artifact_kind": "oci", "source_type": "oci_registry", "repository": art.Repository}},
		"runtime_profile": map[string]any{"kind": "launchable_oci", "image_ref": host + "/" + art.Repository + "@" + art.Digest,
			"ports":     []map[string]any{{"container": 8080, "expose": "private_host_local"}},
			"readiness": map[string]any{"type": "http", "path": "/healthz", "port": 8080, "period_seconds": 1, "failure_threshold": 20}},
	}
	if edit != nil {
		edit(manifest)
	}
	m, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(c.dir, slug+".json")
	if err := os.WriteFile(file, m, 0o644); err != nil {
		t.Fatal(err)
	}
	c.must("manifest", "register", file)
	c.must("app", "publish", slug, "1.0.0", "--reason", "release")
	c.must("app", "entitle", slug)
	return art
}

// allocate creates an allocation of SKU test.1x on the fleet's node and
// returns its id.
func (c *cliApps) allocate(t *testing.T) string {
	t.Helper()
	var alloc client.Allocation
	if err := json.Unmarshal([]byte(c.must("allocation", "create", "--sku", "test.1x", "--node", c.f.Agents[0].NodeID, "-o", "json")), &alloc); err != nil {
		t.Fatal(err)
	}
	return alloc.ID
}
