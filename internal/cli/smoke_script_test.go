package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/scaffold"
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
	noCache := agenttest.NoBuildCache(t)
	goEnv := map[string]string{}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOROOT"} {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatal(err)
		}
		goEnv[k] = strings.TrimSpace(string(out))
	}
	t.Cleanup(func() {
		if goImage.name != "" {
			removeImageFamily(goImage.name)
		}
	})
	testscript.Run(t, testscript.Params{
		Dir:  "testdata/smoke",
		Cmds: map[string]func(*testscript.TestScript, bool, []string){"go-image": goImageCmd},
		Setup: func(env *testscript.Env) error {
			for k, v := range goEnv {
				env.Setenv(k, v)
			}
			env.Setenv("GOFLAGS", "-mod=mod")
			env.Setenv("GOTOOLCHAIN", "local")
			env.Setenv("CGO_ENABLED", "0")
			env.Setenv("HOME", env.WorkDir)
			env.Setenv("GPUAAS_CONFIG_DIR", env.WorkDir+"/.config")
			// Builds skip the engine's build cache: other packages delete
			// images on it meanwhile (agenttest.NoBuildCache).
			env.Setenv("PATH", noCache+string(os.PathListSeparator)+env.Getenv("PATH"))
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

// goImageCmd is the scripts' `go-image`: it sets GO_IMAGE to a Go build
// image made from this machine's own toolchain, for the templates'
// production Dockerfiles (`--build-arg GO_IMAGE=$GO_IMAGE`), since no
// registry here serves golang images. Built once per test binary.
func goImageCmd(ts *testscript.TestScript, neg bool, _ []string) {
	if neg {
		ts.Fatalf("unsupported: ! go-image")
	}
	goImage.once.Do(func() { goImage.name, goImage.err = buildGoImage() })
	ts.Check(goImage.err)
	ts.Setenv("GO_IMAGE", goImage.name)
}

var goImage struct {
	once sync.Once
	name string
	err  error
}

// buildGoImage imports an image holding the host's GOROOT at
// /usr/local/go (what `go build` needs of it: no tests, no cmd sources, no
// vet or cover) and, as /bin/sh, a static build of mvdan.cc/sh's gosh
// (Dockerfile RUN lines go through /bin/sh -c), and the host's root
// certificates, with the environment of the official golang images. Nothing is fetched at build time: the
// templates have no dependencies (GOPROXY=off, GOFLAGS=-mod=mod).
//
// Its GOCACHE comes warm: the standard library compiled as the templates'
// Dockerfiles compile it, kept between runs in the user's cache directory.
// On this Docker (fuse-overlayfs) a build step costs seconds per hundred
// MB of image, and compiling net/http and its dependencies in the container
// took most of a minute of two cores, in a CI run that is CPU-bound.
func buildGoImage() (string, error) {
	dir, err := os.MkdirTemp("", "gpuaas-go-image")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	sh := exec.Command("go", "build", "-o", filepath.Join(dir, "bin", "sh"), "mvdan.cc/sh/v3/cmd/gosh")
	sh.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := sh.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build gosh: %v\n%s", err, out)
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "", err
	}
	root := strings.TrimSpace(string(goroot))

	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	cache = filepath.Join(cache, "gpuaas-test", "go-image-cache")
	warm := filepath.Join(dir, "warm")
	if _, err := scaffold.Write(warm, scaffold.Options{Template: "http", Slug: "warm-up"}); err != nil {
		return "", err
	}
	build := exec.Command("go", "build", "-trimpath", "-o", os.DevNull, ".")
	build.Dir = warm
	build.Env = append(os.Environ(), "GOCACHE="+cache, "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("warm the Go image's build cache: %v\n%s", err, out)
	}
	// The official golang images carry the system's root certificates,
	// which the templates' Dockerfiles copy into the FROM-scratch image.
	roots, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		return "", fmt.Errorf("the Go image needs this machine's root certificates: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "etc", "ssl", "certs"), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "ssl", "certs", "ca-certificates.crt"), roots, 0o644); err != nil {
		return "", err
	}
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777|os.ModeSticky); err != nil {
		return "", err
	}
	if out, err := exec.Command("cp", "-a", cache, filepath.Join(dir, "tmp", "go-cache")).CombinedOutput(); err != nil {
		return "", fmt.Errorf("copy the build cache: %v\n%s", err, out)
	}
	name := fmt.Sprintf("gpuaas-go-standin:%d", time.Now().UnixNano())
	// tar's --transform puts GOROOT at usr/local/go, whatever it is called here.
	script := `g=$(basename "$2"); t=$g/pkg/tool/*
tar -c -C "$1" bin etc tmp -C "$(dirname "$2")" --exclude="$g/test" --exclude="$g/api" --exclude="$g/doc" --exclude="$g/misc" \
  --exclude="$g/lib" --exclude="$g/src/cmd" --exclude='*_test.go' --exclude=testdata \
  --exclude="$t/vet" --exclude="$t/cover" --exclude="$t/fix" --exclude="$t/preprofile" \
  --transform "s,^$g,usr/local/go," "$g" |
docker import -c 'ENV PATH=/usr/local/go/bin:/bin' -c 'ENV GOCACHE=/tmp/go-cache' -c 'ENV GOPATH=/tmp/go' \
  -c 'ENV GOPROXY=off' -c 'ENV GOFLAGS=-mod=mod' -c 'ENV GOTOOLCHAIN=local' - "$3" >/dev/null`
	if out, err := exec.Command("bash", "-c", script, "bash", dir, root, name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("import the Go image: %v\n%s", err, out)
	}
	return name, nil
}

// removeImageFamily removes image and the images built on it (the
// classic builder keeps every step of a build stage as an image).
func removeImageFamily(image string) {
	id := func(ref, format string) string {
		out, _ := exec.Command("docker", "image", "inspect", "--format", format, ref).Output()
		return strings.TrimSpace(string(out))
	}
	root := id(image, "{{.Id}}")
	if root == "" {
		return
	}
	out, _ := exec.Command("docker", "images", "-a", "-q", "--no-trunc", "--filter", "since="+image).Output()
	parent := map[string]string{}
	for _, c := range strings.Fields(string(out)) {
		parent[c] = id(c, "{{.Parent}}")
	}
	var family []string // children before their parents
	var descends func(c string) bool
	descends = func(c string) bool { return c == root || c != "" && descends(parent[c]) }
	for c := range parent {
		if descends(c) {
			family = append(family, c)
		}
	}
	slices.SortFunc(family, func(a, b string) int { return depth(parent, b) - depth(parent, a) })
	for _, c := range append(family, image) {
		_ = exec.Command("docker", "rmi", "-f", c).Run()
	}
}

func depth(parent map[string]string, c string) int {
	n := 0
	for ; parent[c] != ""; c = parent[c] {
		n++
	}
	return n
}
