package doctest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// repoRoot is the repository this test file lives in.
func repoRoot(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// requireTools skips when Docker or jq is missing, loudly, and fails on CI:
// the quickstart needs both.
func requireTools(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"docker", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(t, tool+" is not installed")
		}
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		missing(t, "no Docker engine answers: "+strings.TrimSpace(string(out)))
	}
}

func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: %s", why)
	}
	t.Skipf("SKIPPED: %s (the quickstart needs Go, jq and Docker)", why)
}

// buildGpuaas returns the directory holding the gpuaas binary (built once
// per test process), to go first on a walk's PATH.
func buildGpuaas(t testing.TB) string {
	t.Helper()
	return filepath.Dir(testbin.Gpuaas(t))
}

// anyPort has gpuaas dev bind a port of its own choosing: the walks find
// it as the docs say, from api_url in .gpuaas/dev-credentials.json (which
// names the bound port), so no test guesses a free port for another process.
const anyPort = "GPUAAS_LISTEN=127.0.0.1:0"

// shellEnv is a clean environment for a walk: the built gpuaas first on
// PATH, then a docker whose builds skip the engine's build cache (other
// packages delete images on the same engine meanwhile; see
// agenttest.NoBuildCache), its own CLI config dir, nothing inherited that
// would pick another server, profile or project.
func shellEnv(t testing.TB, bin string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GPUAAS_") || k == "PATH" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PATH="+strings.Join([]string{bin, agenttest.NoBuildCache(t), os.Getenv("PATH")}, string(os.PathListSeparator)),
		"GPUAAS_CONFIG_DIR="+t.TempDir())
	return append(env, extra...)
}

// runBash runs script with bash -euo pipefail in dir, in its own process
// group so that anything it leaves running (gpuaas dev) is stopped after.
func runBash(t testing.TB, dir string, env []string, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"-euo", "pipefail", "-c", script, "walk"}, args...)...)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Start()
	if err == nil {
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) })
		err = cmd.Wait()
	}
	if err != nil {
		t.Fatalf("%v\n--- output ---\n%s", err, out.String())
	}
	return out.String()
}

// shBlocks returns the ```sh fenced blocks of a markdown file, in order.
func shBlocks(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []string
	var cur *strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```sh":
			cur = &strings.Builder{}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

// copyTree copies the files under src (one level of directories deep is
// enough for examples/) into dst.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The docs are tests: every sh block of docs/quickstart.md, in order, in one
// bash, from a directory holding what the doc uses of the repository
// (examples/my-app), against a gpuaas dev started first as the README says
// (the walk must find and use it, not start another). Service-account
// tokens live one minute and the walk pauses past that once, as a reader
// would: the CLI mints new tokens from the key files by itself.
func TestQuickstartDoc(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpuaas and a Docker image")
	}
	requireTools(t)
	root := repoRoot(t)
	blocks := shBlocks(t, filepath.Join(root, "docs", "quickstart.md"))
	if len(blocks) < 12 {
		t.Fatalf("docs/quickstart.md has %d sh blocks; the walk needs all of them", len(blocks))
	}
	work, env := devWithExampleApp(t, "gpuaas-doctest",
		"GPUAAS_SERVICE_ACCOUNT_TOKEN_TTL=1m", "GPUAAS_BILLING_METER_INTERVAL=2s")

	var parts []string
	for _, b := range blocks {
		parts = append(parts, b)
		if strings.Contains(b, "gpuaas instance create") {
			parts = append(parts, "sleep 65   # reading pace: every service-account token expires here")
		}
	}
	out := runBash(t, work, env, strings.Join(parts, "\n"))
	for _, want := range []string{"using the gpuaas dev already running here", "pushed ", `"trust_state": "verified"`,
		`"lifecycle_state": "active"`, `"status": "published"`, `"tenant_boundary_mode": "project_isolated"`,
		`Active profile: "default"`, `"status": "running"`, "hello from my-app 1.0.0", "hello from my-app 2.0.0",
		`The token of profile "publisher" expired; minted a new one`, "apps.instance.upgraded", "apps.instance.rolled_back",
		"decommissioned", "no container left", "wrote .quickstart/my-app (template http)", "✓ usage deduplicated", "smoke passed in",
		"my-app/requests"} {
		if !strings.Contains(out, want) {
			t.Errorf("the walk's output lacks %q", want)
		}
	}
	for _, leaked := range []string{"publisher.json", "operator.json", "cosign.key", "my-app.yaml"} {
		if _, err := os.Stat(filepath.Join(work, leaked)); err == nil {
			t.Errorf("the walk wrote %s outside .quickstart/", leaked)
		}
	}
	// The app reported its requests itself (three in step 8, two more in
	// step 10): a row on its own meter, source app_runtime.
	if !regexp.MustCompile(`app_runtime\s+requests\s+[1-9][0-9]*\s+my-app/requests`).MatchString(out) {
		t.Errorf("no usage row of requests the app reported")
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("output:\n%s", out)
	}
}

// devWithExampleApp starts gpuaas dev the way the README does in a fresh
// directory holding a copy of examples/my-app, with IMAGE set to a name
// unique to this test (prefix-<nanoseconds>) and extra in the environment.
// Its images and containers are removed at cleanup. It returns the
// directory and the environment the walk's scripts run with.
func devWithExampleApp(t testing.TB, prefix string, extra ...string) (work string, env []string) {
	t.Helper()
	work = t.TempDir()
	copyTree(t, filepath.Join(repoRoot(t), "examples", "my-app"), filepath.Join(work, "examples", "my-app"))
	image := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	bin := buildGpuaas(t)
	env = shellEnv(t, bin, append([]string{anyPort, "IMAGE=" + image}, extra...)...)
	t.Cleanup(func() { removeImages(t, image) })
	t.Cleanup(func() { removeProjectContainers(t, filepath.Join(work, ".gpuaas")) })
	startDevLikeTheReadme(t, bin, work, env)
	return work, env
}

// startDevLikeTheReadme runs `gpuaas dev` in dir, as the README's first
// command does, and waits until it is ready; it stops with the test.
func startDevLikeTheReadme(t testing.TB, bin, dir string, env []string) {
	t.Helper()
	dev := exec.Command(filepath.Join(bin, "gpuaas"), "dev")
	dev.Env, dev.Dir = env, dir
	devOut := startWithLog(t, dev)
	creds := filepath.Join(dir, ".gpuaas", "dev-credentials.json")
	for deadline := time.Now().Add(30 * time.Second); ; {
		if b, err := os.ReadFile(creds); err == nil {
			var c struct {
				APIURL string `json:"api_url"`
			}
			if json.Unmarshal(b, &c) == nil && c.APIURL != "" {
				if r, err := http.Get(c.APIURL + "/readyz"); err == nil {
					r.Body.Close()
					if r.StatusCode == http.StatusOK {
						return
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gpuaas dev did not become ready:\n%s", devOut.String())
		}
		time.Sleep(100 * time.Millisecond) // another process; nothing to subscribe to
	}
}

// startWithLog starts gpuaas dev (dev), stops it with SIGTERM when the
// test ends, and returns its output; a failed test logs the end of it.
func startWithLog(t testing.TB, dev *exec.Cmd) *testbin.Output {
	t.Helper()
	out := &testbin.Output{}
	dev.Stdout, dev.Stderr = out, out
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Process.Signal(syscall.SIGTERM); _ = dev.Wait() })
	t.Cleanup(func() { // runs first, while it still runs
		if t.Failed() {
			t.Logf("the end of gpuaas dev's log:\n%s", lastLines(out.String(), 80))
		}
	})
	return out
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// removeImages removes the local images the walk built (every tag of the
// test's own image name): the engine is shared with the rest of the suite.
func removeImages(t testing.TB, name string) {
	out, _ := exec.Command("docker", "images", "-q", name).Output()
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		_ = exec.Command("docker", append([]string{"rmi", "-f"}, ids...)...).Run()
	}
}

// removeProjectContainers removes what a failed walk left running for the
// dev project of dataDir (a passing walk leaves nothing: it checks that
// itself). Only that project's containers: other tests share the engine.
func removeProjectContainers(t testing.TB, dataDir string) {
	b, err := os.ReadFile(filepath.Join(dataDir, "dev-credentials.json"))
	if err != nil {
		return
	}
	var creds struct {
		ProjectID string `json:"project_id"`
	}
	if json.Unmarshal(b, &creds) != nil || creds.ProjectID == "" {
		return
	}
	ids, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=gpuaas.project_id="+creds.ProjectID).Output()
	if f := strings.Fields(string(ids)); len(f) > 0 {
		t.Logf("removing %d container(s) the walk left", len(f))
		_ = exec.Command("docker", append([]string{"rm", "-f", "-v"}, f...)...).Run()
	}
}

// examples/quickstart/quickstart.sh passes twice in a row on one data dir,
// started from a directory other than its own.
func TestQuickstartScriptTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpuaas and a Docker image")
	}
	requireTools(t)
	root := repoRoot(t)
	bin := buildGpuaas(t)
	data := t.TempDir()
	env := shellEnv(t, bin, anyPort, "GPUAAS_DATA_DIR="+data, "DATA_DIR="+data, "GPUAAS_BILLING_METER_INTERVAL=2s")
	// One gpuaas dev for both runs, stopped with the test.
	dev := exec.Command(filepath.Join(bin, "gpuaas"), "dev")
	dev.Env, dev.Dir = env, t.TempDir()
	devOut := startWithLog(t, dev)
	creds := filepath.Join(data, "dev-credentials.json")
	for deadline := time.Now().Add(30 * time.Second); ; {
		if st, err := os.Stat(creds); err == nil && st.Size() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gpuaas dev did not write %s:\n%s", creds, devOut.String())
		}
		time.Sleep(100 * time.Millisecond) // polling a file another process writes; no hook to wait on
	}
	script := filepath.Join(root, "examples", "quickstart", "quickstart.sh")
	for i := 1; i <= 2; i++ {
		out := runBash(t, t.TempDir(), env, `"$@"`, script)
		for _, want := range []string{"hello from my-app 1.", "apps.instance.upgraded", "apps.instance.rolled_back", "no container left",
			"my-app/session_seconds", "== done"} {
			if !strings.Contains(out, want) {
				t.Fatalf("run %d lacks %q:\n%s", i, want, out)
			}
		}
	}
	// Each run cleaned up after itself: no version left launchable, no
	// service account left, no image left on the engine.
	out := runBash(t, t.TempDir(), env, `jq -er .admin_password "$DATA_DIR/dev-credentials.json" |
  gpuaas login --email "$(jq -er .admin_email "$DATA_DIR/dev-credentials.json")" --password-stdin --api-url "$(jq -er .api_url "$DATA_DIR/dev-credentials.json")" >/dev/null
export GPUAAS_API_URL=$(jq -er .api_url "$DATA_DIR/dev-credentials.json") GPUAAS_PROJECT_ID=dev
echo "published: $(gpuaas app versions my-app -o json | jq '[.items[] | select(.status == "published")] | length')"
echo "accounts: $(gpuaas sa list -o json | jq '[.items[] | select(.slug | test("^(publisher|operator)-"))] | length')"
echo "images: $(docker images -q my-app-qs | wc -l)"`)
	for _, want := range []string{"published: 0", "accounts: 0", "images: 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("after two runs: %q not in\n%s", want, out)
		}
	}
}
