package doctest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The documented build (make build) names its commit even where the Go
// toolchain stamps nothing (GOFLAGS=-buildvcs=false).
func TestMakeBuildNamesItsCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpuaas")
	}
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(t, tool+" is not installed")
		}
	}
	root := repoRoot(t)
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		missing(t, "not a git checkout: "+err.Error())
	}
	bin := t.TempDir()
	mk := exec.Command("make", "build", "BIN="+bin)
	mk.Dir = root
	mk.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(bin, "gpuaas"), "version", "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Version, Commit string }
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("version output: %v %s", err, out)
	}
	if v.Commit != strings.TrimSpace(string(head)) || v.Version == "" || v.Version == "devel" || v.Version == "unknown" {
		t.Fatalf("make build made %+v at %s", v, head)
	}
}
