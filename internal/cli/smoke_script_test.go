package cli

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
)

// TestAppSmokeScripts runs testdata/smoke/*.txtar: per template, what a new
// team types — gpuaas init, go build, docker build, gpuaas app smoke — and
// a broken app that smoke must fail with the reason. Real Docker, a real
// in-process control plane and node agent.
func TestAppSmokeScripts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds apps and images and runs them on Docker")
	}
	agenttest.RequireDocker(t)
	goEnv := map[string]string{}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOROOT"} {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatal(err)
		}
		goEnv[k] = strings.TrimSpace(string(out))
	}
	testscript.Run(t, testscript.Params{
		Dir: "testdata/smoke",
		Setup: func(env *testscript.Env) error {
			for k, v := range goEnv {
				env.Setenv(k, v)
			}
			env.Setenv("GOFLAGS", "-mod=mod")
			env.Setenv("GOTOOLCHAIN", "local")
			env.Setenv("CGO_ENABLED", "0")
			env.Setenv("HOME", env.WorkDir)
			env.Setenv("GPUAAS_CONFIG_DIR", env.WorkDir+"/.config")
			if h := os.Getenv("DOCKER_HOST"); h != "" {
				env.Setenv("DOCKER_HOST", h)
			}
			image := fmt.Sprintf("gpuaas-smoke-%d:t", time.Now().UnixNano())
			env.Setenv("IMAGE", image)
			env.Defer(func() { _ = exec.Command("docker", "rmi", "-f", image).Run() })
			return nil
		},
	})
}
