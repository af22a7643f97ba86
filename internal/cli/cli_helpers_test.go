package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/servertest"
)

// cliRunner runs the CLI in-process with stdin, returning stdout, stderr
// and the error Execute would report.
type cliRunner func(stdin string, args ...string) (string, string, error)

// cliAgainst points the CLI at s with a fresh config dir (no profile, no
// token, no project from the environment) and returns a runner. It sets
// the process environment (t.Setenv), so a test that uses it, or sets
// the environment itself, cannot be parallel; the CLI's other tests are.
func cliAgainst(t *testing.T, s *servertest.Server) cliRunner {
	t.Helper()
	t.Setenv(envConfigDir, filepath.Join(t.TempDir(), "config"))
	t.Setenv(envAPIURL, s.URL)
	t.Setenv(envToken, "")
	t.Setenv(envProfile, "")
	t.Setenv("GPUAAS_PROJECT_ID", "")
	t.Setenv(envOrg, "")
	return func(stdin string, args ...string) (string, string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		root := NewRoot(&out, &errOut)
		root.SetIn(strings.NewReader(stdin))
		root.SetArgs(args)
		err := root.ExecuteContext(context.Background())
		return out.String(), errOut.String(), err
	}
}
