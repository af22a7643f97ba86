package main_test

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// `gpuaas version` reports the commit and time the binary was built from,
// not a placeholder: the test binary is built in this git checkout.
func TestVersionNamesTheBuild(t *testing.T) {
	bin := buildBinary(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: the toolchain stamps no commit")
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var in struct {
		Version, Commit, BuildDate, GoVersion string
	}
	var raw map[string]any
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	in.Version, _ = raw["version"].(string)
	in.Commit, _ = raw["commit"].(string)
	in.BuildDate, _ = raw["build_date"].(string)
	in.GoVersion, _ = raw["go_version"].(string)
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(in.Commit) {
		t.Fatalf("commit %q is not a git revision", in.Commit)
	}
	if in.Version == "" || in.Version == "dev" {
		t.Fatalf("version %q", in.Version)
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT`).MatchString(in.BuildDate) || !strings.HasPrefix(in.GoVersion, "go") {
		t.Fatalf("build date %q, go %q", in.BuildDate, in.GoVersion)
	}
	text, err := exec.Command(bin, "version", "-o", "table").Output()
	if err != nil || !strings.Contains(string(text), "commit:  "+in.Commit) {
		t.Fatalf("text form: %s %v", text, err)
	}
}
