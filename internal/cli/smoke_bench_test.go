package cli

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
)

// BenchmarkInitToSmoke times what a new team does first: gpuaas init, go
// build, docker build, gpuaas app smoke passing (warm Go and Docker caches
// after the first round). Target: ≤ 60 s per round.
//
//	CI=true go test ./internal/cli -run '^$' -bench InitToSmoke -benchtime 3x
func BenchmarkInitToSmoke(b *testing.B) {
	agenttest.RequireDocker(b)
	b.Setenv(envConfigDir, b.TempDir())
	for i := 0; b.Loop(); i++ {
		dir := filepath.Join(b.TempDir(), "bench-app")
		image := fmt.Sprintf("gpuaas-bench-smoke-%d:%d", time.Now().UnixNano(), i)
		run := func(name string, args ...string) {
			cmd := exec.Command(name, args...)
			cmd.Dir = dir
			cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
			}
		}
		var out bytes.Buffer
		root := NewRoot(&out, &out)
		root.SetArgs([]string{"init", dir, "--template", "http"})
		if err := root.Execute(); err != nil {
			b.Fatal(err, out.String())
		}
		run("go", "build", "-o", "app", ".")
		run("cp", "/etc/ssl/certs/ca-certificates.crt", ".")
		run("docker", "build", "--no-cache", "-q", "-f", "Dockerfile.prebuilt", "-t", image, ".")
		out.Reset()
		root = NewRoot(&out, &out)
		root.SetArgs([]string{"app", "smoke", dir, "--image", image})
		if err := root.ExecuteContext(context.Background()); err != nil || !strings.Contains(out.String(), "smoke passed") {
			b.Fatalf("smoke: %v\n%s", err, out.String())
		}
		_ = exec.Command("docker", "rmi", "-f", image).Run()
	}
}
