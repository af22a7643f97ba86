package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCloudInitValidate(t *testing.T) {
	t.Parallel()
	ok := filepath.Join("..", "..", "examples", "cloud-init", "bootstrap.yaml")
	out, _, err := runCLI(t, "cloudinit", "validate", ok, "-o", "table")
	if err != nil || !strings.Contains(out, "bootstrap.yaml: ok") {
		t.Fatalf("the template: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("#cloud-config\nruncmds: [ls]\nusers:\n  - {name: bob, passwd: x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCLI(t, "cloudinit", "validate", bad, "-o", "table")
	var code exitCode
	if !errors.As(err, &code) || code != 1 {
		t.Fatalf("a bad bootstrap: err %v, want exit 1", err)
	}
	for _, want := range []string{bad + ":2: /runcmds: unknown key \"runcmds\" (did you mean runcmd?)", bad + ":4: /users/0/passwd: passwd would put a credential"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}
}
