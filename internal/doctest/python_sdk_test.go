package doctest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// python finds a Python 3 with the SDK's Debian-packaged dependencies
// (python3-httpx, python3-cryptography, python3-pytest), or skips loudly
// (fails on CI).
func python(t testing.TB) string {
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil {
			if exec.Command(path, "-c", "import httpx, cryptography, pytest").Run() == nil {
				return path
			}
		}
	}
	missing(t, "no python3 with httpx, cryptography and pytest (apt-get install python3-httpx python3-cryptography python3-pytest)")
	return ""
}

// The Python SDK (sdk/python) against a real gpuaas dev: its pytest suite
// signs in, mints service-account tokens, launches, upgrades, rolls back and
// decommissions an instance of the example app, reports usage with the
// identity mounted in its container, and resumes the event stream.
func TestPythonSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpuaas and Docker images")
	}
	requireTools(t)
	py := python(t)
	root := repoRoot(t)
	work, env := devWithExampleApp(t, "gpuaas-pysdk")
	out := runBash(t, work, env, shipScript, "1.0.0", "sdk-app", "requests")
	out += runBash(t, work, env, shipScript, "2.0.0", "sdk-app", "requests")
	if !strings.Contains(out, "shipped sdk-app 2.0.0") {
		t.Fatalf("setup:\n%s", out)
	}
	cmd := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	cmd.Dir = filepath.Join(root, "sdk", "python")
	cmd.Env = append(env, "PYTHONPATH="+filepath.Join(root, "sdk", "python", "src"), "PYTHONDONTWRITEBYTECODE=1",
		"GPUAAS_DEV_CREDENTIALS="+filepath.Join(work, ".gpuaas", "dev-credentials.json"), "GPUAAS_TEST_APP=sdk-app")
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, res)
	}
	// Every test ran against the server: the suite's offline tests pass
	// without it, and the ones that need it skip when it is missing.
	if !strings.Contains(string(res), " passed") || strings.Contains(string(res), "skipped") || strings.Contains(string(res), "deselected") {
		t.Errorf("pytest skipped tests or passed none:\n%s", res)
	}
	t.Logf("pytest:\n%s", res)
}
