package agent_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The node agent runs on GPU hosts with none of the control plane: it
// depends on the wire contract and the public client, never on the server,
// its store or a domain (the CLI wires the in-process dev agent).
func TestAgentDoesNotDependOnTheControlPlane(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/gpuaas/gpuaas/internal/agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"internal/server", "internal/store", "internal/httpapi", "internal/nodes", "internal/instances"} {
			if pkg == "github.com/gpuaas/gpuaas/"+banned {
				t.Errorf("internal/agent depends on %s", banned)
			}
		}
	}
}
