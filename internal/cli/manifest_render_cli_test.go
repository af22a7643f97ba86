package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// The shipped manifests are valid as they are: a new team copies one and
// sees "ok", not a placeholder error.
func TestShippedManifestsValidateAsTheyAre(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "examples", "manifests", "*"))
	files = append(files, filepath.Join("..", "..", "examples", "my-app", "my-app.yaml"))
	refs, _ := filepath.Glob(filepath.Join("..", "..", "examples", "*", "gpuaas.yaml"))
	if len(refs) < 2 {
		t.Fatalf("reference apps' manifests: %v", refs)
	}
	files = append(files, refs...)
	for _, f := range files {
		r, err := manifest.ValidateFile(f)
		if err != nil || !r.Valid {
			t.Errorf("%s: %v %v", f, err, r.Problems)
		}
	}
}

func TestManifestSetRendersValidatesAndRegisters(t *testing.T) {
	t.Setenv(envConfigDir, t.TempDir())
	src := filepath.Join("..", "..", "examples", "my-app", "my-app.yaml")
	ref := "localhost:5000/p1/my-app@sha256:" + strings.Repeat("ab", 32)

	out, _, err := runCLI(t, "manifest", "render", src, "--set", "version=1.10", "--set", "image_ref="+ref, "--set", "version.runtime_profile.resources.gpu_count.default=1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"version: \"1.10\"", "image_ref: " + ref, "default: 1", "# The quickstart's manifest"} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
	dst := filepath.Join(t.TempDir(), "out.yaml")
	if _, _, err := runCLI(t, "manifest", "render", src, "--set", "version=2.0.0", "--out", dst); err != nil {
		t.Fatal(err)
	}
	if r, err := manifest.ValidateFile(dst); err != nil || !r.Valid || r.Versions[0].Version != "2.0.0" {
		t.Fatalf("rendered file: %v %+v", err, r)
	}

	// A value that breaks the manifest: exit 1, the problem names the
	// rendered document, and --out is not written.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_, errOut, err := runCLI(t, "manifest", "render", src, "--set", "image_ref=my-app:latest", "--out", bad)
	var code exitCode
	if !errors.As(err, &code) || code != 1 || !strings.Contains(errOut, src+" (with --set):") || !strings.Contains(errOut, "/version/runtime_profile/image_ref: must be pinned by digest") {
		t.Fatalf("bad --set: %v %q", err, errOut)
	}
	if _, err := os.Stat(bad); err == nil {
		t.Fatal("render wrote a manifest with problems")
	}
	out, _, err = runCLI(t, "manifest", "validate", src, "--set", "image_ref=my-app:latest", "-o", "table")
	if !errors.As(err, &code) || !strings.Contains(out, "/version/runtime_profile/image_ref") {
		t.Fatalf("validate --set: %v %q", err, out)
	}
	_, _, err = runCLI(t, "manifest", "validate", src, "--set", "nokeyvalue")
	if err == nil || !strings.Contains(err.Error(), "want KEY=VALUE") {
		t.Fatalf("malformed --set: %v", err)
	}

	// register submits the rendered document.
	s := servertest.Start(t, store.SQLite)
	conn := []string{"--api-url", s.URL, "--token", s.Admin().Token}
	out, errOut, err = runCLI(t, append([]string{"manifest", "register", src, "--set", "version=3.1.0", "--set", "image_ref=" + ref, "--set", "app.slug=set-app", "-o", "table"}, conn...)...)
	if err != nil || !strings.Contains(out, "app set-app: registered") || !strings.Contains(out, "3.1.0") {
		t.Fatalf("register --set: %v %q %q", err, out, errOut)
	}
	v := s.Admin().Do("GET", "/api/v1/apps/catalog/set-app/versions", nil).Want(t, 200)
	if !strings.Contains(string(v.Body), ref) {
		t.Fatalf("registered version does not name the image it was given: %s", v.Body)
	}
}
