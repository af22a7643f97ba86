package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The Go client is exported as the SDK: nothing it exports may come from an
// internal package, which no one outside this module can name.
func TestClientImportsNoInternalPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/gpuaas/gpuaas/client/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, "github.com/gpuaas/gpuaas/internal/") {
				t.Errorf("%s imports %s", fields[0], imp)
			}
		}
	}
}
