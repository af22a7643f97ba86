package store_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Who may import internal/store: the wiring, the CLI's migrate command and
// test helpers. Every domain reaches the database through its own storage
// interface (see internal/storage), which this package implements.
var mayImportStore = []string{
	"internal/server",
	"internal/cli",
	"internal/store/storetest",
	"internal/servertest",
	"internal/doctest",
}

func TestOnlyTheWiringImportsTheStore(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/gpuaas/gpuaas/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/gpuaas/gpuaas/"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], mod)
		if pkg == "internal/store" || !slices.Contains(fields[1:], mod+"internal/store") {
			continue
		}
		if slices.Contains(mayImportStore, pkg) {
			continue
		}
		t.Errorf("%s imports internal/store: a domain declares the queries it needs as its own interface over its own types (internal/storage), and the wiring hands it store's implementation", pkg)
	}
}
