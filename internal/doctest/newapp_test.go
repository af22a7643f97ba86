package doctest

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestNewAppDoc runs docs/new-app.md: `gpuaas init` in an empty directory,
// then build, `gpuaas app smoke` passing, push signed, register with --set, publish, entitle, launch
// with a parameter, the app's own usage report, decommission — against a
// gpuaas dev started as the README says, with a real Docker engine.
func TestNewAppDoc(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpuaas, an app and a Docker image")
	}
	requireTools(t)
	blocks := shBlocks(t, filepath.Join(repoRoot(t), "docs", "new-app.md"))
	if len(blocks) < 8 {
		t.Fatalf("docs/new-app.md has %d sh blocks; the walk needs all of them", len(blocks))
	}
	work := t.TempDir()
	image := fmt.Sprintf("gpuaas-newapp-%d", time.Now().UnixNano())
	bin := buildGpuaas(t)
	env := shellEnv(t, bin, anyPort, "IMAGE="+image)
	t.Cleanup(func() { removeImages(t, image) })
	t.Cleanup(func() { removeProjectContainers(t, filepath.Join(work, ".gpuaas")) })
	startDevLikeTheReadme(t, bin, work, env)

	out := runBash(t, work, env, strings.Join(blocks, "\n"))
	for _, want := range []string{"wrote hello-kit (template http)", "gpuaas.yaml: ok: hello-kit 0.1.0", "✓ usage deduplicated", "smoke passed in", "trust: verified",
		"app hello-kit: registered", "howdy from hello-kit 1.0.0", "requests reported: 5", `"msg":"usage reported"`,
		"hello-kit/requests", "decommissioned", "containers left: 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("the walk's output lacks %q", want)
		}
	}
	// The five requests came back as one app_runtime row on the app's own
	// meter: reported by the app, not measured by the platform.
	if !regexp.MustCompile(`app_runtime\s+requests\s+5\s+hello-kit/requests`).MatchString(out) {
		t.Errorf("no usage row of 5 requests from the app")
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("--- walk output ---\n%s", out)
	}
}
