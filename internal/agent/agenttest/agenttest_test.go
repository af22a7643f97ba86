package agenttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The docker of NoBuildCache, and Docker.Run, add --no-cache to a build;
// the shim passes every other command through unchanged, arguments and exit
// status included, to the docker that was on PATH when it was made.
func TestNoBuildCache(t *testing.T) {
	fake := t.TempDir()
	script := "#!/bin/sh\nprintf '%s|' \"$@\"\n[ \"$1\" = fail ] && exit 7\nexit 0\n"
	if err := os.WriteFile(filepath.Join(fake, "docker"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	shim := filepath.Join(NoBuildCache(t), "docker")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"build", "-q", "-f", "Dockerfile.prebuilt", "-t", "app:1 0", "."}, "build|--no-cache|-q|-f|Dockerfile.prebuilt|-t|app:1 0|.|"},
		{[]string{"images", "-q", "--filter", "label=build"}, "images|-q|--filter|label=build|"},
		{[]string{"rmi", "build"}, "rmi|build|"},
	} {
		out, err := exec.Command(shim, c.args...).Output()
		if err != nil || string(out) != c.want {
			t.Errorf("docker %s ran as %q (%v), want %q", strings.Join(c.args, " "), out, err, c.want)
		}
	}
	err := exec.Command(shim, "fail").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Errorf("a failing command's status: %v, want exit status 7", err)
	}

	d := Docker{T: t, config: t.TempDir()}
	if out := d.Must("", "build", "-q", "-t", "x", "."); out != "build|--no-cache|-q|-t|x|.|" {
		t.Errorf("Docker.Run ran a build as %q", out)
	}
	if out := d.Must("", "push", "build"); out != "push|build|" {
		t.Errorf("Docker.Run ran a push as %q", out)
	}
}
