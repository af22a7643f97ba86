package cli

import (
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/scaffold"
)

// gpuaas init --help says what each template is: a template added without
// a line there fails here.
func TestInitHelpNamesEveryTemplate(t *testing.T) {
	out, _, err := runCLI(t, "init", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range scaffold.Templates() {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("gpuaas init --help does not describe the %s template:\n%s", name, out)
		}
	}
}
