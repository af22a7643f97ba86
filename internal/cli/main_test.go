package cli

import (
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the scripts under testdata/ run this test binary as the
// gpuaas command (testscript), so they exercise the CLI as it ships.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"gpuaas": func() { os.Exit(Execute()) },
	})
}
