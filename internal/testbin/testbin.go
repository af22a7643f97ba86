// Package testbin builds the gpuaas binary (and other main packages of the
// module, such as the reference external worker) for tests that run it as
// a child process: once per test process, package and set of linker flags,
// however many tests ask; and static binaries of small modules of their own
// for test images (Static). Only tests import it.
//
// The binary lives in a temporary directory that [Main] (or [M]) removes
// when the package's tests end. A test process without that TestMain
// builds into a fixed directory under the user cache dir instead
// (os.UserCacheDir()/gpuaas-testbin/<key>/gpuaas), replaced atomically on
// every build: one file per linker-flag set, never one per run.
package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// build is one binary: the first caller builds it, the rest wait and share.
type build struct {
	once sync.Once
	path string
	err  error
}

var (
	mu      sync.Mutex
	builds  = map[string]*build{} // by package and ldflags
	tempDir string                // set while Main's tests run; removed after
)

// Gpuaas returns the path of ./cmd/gpuaas built from this module, named
// "gpuaas" alone in its directory (so filepath.Dir of it can go first on a
// PATH).
func Gpuaas(t testing.TB) string { return GpuaasLDFlags(t, "") }

// GpuaasLDFlags is Gpuaas built with go build -ldflags ldflags (e.g. to
// stamp internal/buildinfo's version); each distinct ldflags builds once.
func GpuaasLDFlags(t testing.TB, ldflags string) string {
	t.Helper()
	return binary(t, "./cmd/gpuaas", ldflags)
}

// Program returns the path of another main package of this module built
// the same way (pkg relative to the module root, e.g.
// "./examples/external-worker"), named after its last path element.
func Program(t testing.TB, pkg string) string {
	t.Helper()
	return binary(t, pkg, "")
}

// Static builds the main package in dir, a module of its own (an example
// app, a test server written out by the test), into out: a static Linux
// binary without symbols, what an image FROM scratch runs. extraLDFlags
// are added to "-s -w" (e.g. "-X main.version=1.2.0"). Unlike Gpuaas and
// Program it builds on every call: each caller's source is its own.
func Static(t testing.TB, dir, out, extraLDFlags string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", strings.TrimSpace("-s -w "+extraLDFlags), "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOWORK=off", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in %s: %v\n%s", dir, err, b)
	}
}

func binary(t testing.TB, pkg, ldflags string) string {
	t.Helper()
	mu.Lock()
	b := builds[pkg+"\x00"+ldflags]
	if b == nil {
		b = &build{}
		builds[pkg+"\x00"+ldflags] = b
	}
	dir := tempDir
	mu.Unlock()
	b.once.Do(func() { b.path, b.err = goBuild(dir, pkg, ldflags) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func goBuild(tmp, pkg, ldflags string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(root + "\x00" + pkg + "\x00" + ldflags))
	key := hex.EncodeToString(sum[:8])
	var dir string
	if tmp != "" {
		dir = filepath.Join(tmp, key)
	} else {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("testbin: no TestMain calling testbin.Main and no user cache dir: %w", err)
		}
		dir = filepath.Join(cache, "gpuaas-testbin", key)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Build beside the target and rename over it: another test process
	// sharing the cache dir runs either the old file or the new one.
	name := filepath.Base(pkg)
	out := filepath.Join(dir, name)
	part := filepath.Join(dir, fmt.Sprintf(".%s-%d.part", name, os.Getpid()))
	args := []string{"build", "-o", part}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = root
	// go test runs packages in parallel processes. On a cold build cache
	// each would compile the whole tree at the same time; one at a time,
	// the first compiles and the rest find the packages cached and link.
	unlock, err := LockBuilds()
	if err != nil {
		return "", err
	}
	defer unlock()
	if b, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(part)
		return "", fmt.Errorf("testbin: go %s %s in %s: %v\n%s", strings.Join(args, " "), pkg, root, err, b)
	}
	if err := os.Rename(part, out); err != nil {
		return "", err
	}
	return out, nil
}

// LockBuilds takes a lock shared by every test process of this machine;
// a test that builds a binary of this module itself holds it while it does.
func LockBuilds() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "gpuaas-testbin.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("testbin: build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("testbin: build lock: %w", err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// moduleRoot is the directory of this module's go.mod, found from the
// working directory (a test runs in its package's directory).
func moduleRoot() (string, error) {
	if b, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		if gomod := strings.TrimSpace(string(b)); gomod != "" && gomod != os.DevNull {
			return filepath.Dir(gomod), nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testbin: no go.mod above the working directory")
		}
		dir = parent
	}
}

// M wraps a testing.M so that Run removes the binaries built while the
// tests ran; for a TestMain that already hands m to something else, as
// goleak.VerifyTestMain(testbin.M{M: m}) does.
type M struct{ *testing.M }

// Run runs the tests with binaries built into a temporary directory, and
// removes it after.
func (m M) Run() int {
	dir, err := os.MkdirTemp("", "gpuaas-testbin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbin:", err)
		return 1
	}
	mu.Lock()
	tempDir = dir
	mu.Unlock()
	defer os.RemoveAll(dir)
	return m.M.Run()
}

// Main is a whole TestMain: func TestMain(m *testing.M) { testbin.Main(m) }.
func Main(m *testing.M) { os.Exit(M{m}.Run()) }

// WaitReady waits until a gpuaas started with --addr-file addrFile has
// written the file and answers 200 on /readyz, and returns its base URL
// (http://host:port). A child process has no hook to wait on, so this
// polls; on timeout it fails with logs(), which may be nil.
func WaitReady(t testing.TB, addrFile string, timeout time.Duration, logs func() string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var why error
	for {
		if b, err := os.ReadFile(addrFile); err != nil {
			why = err
		} else {
			base := strings.TrimSpace(string(b))
			r, err := http.Get(base + "/readyz")
			if err == nil {
				r.Body.Close()
				if r.StatusCode == http.StatusOK {
					return base
				}
				err = fmt.Errorf("%s/readyz: %s", base, r.Status)
			}
			why = err
		}
		if time.Now().After(deadline) {
			out := ""
			if logs != nil {
				out = logs()
			}
			t.Fatalf("gpuaas did not become ready within %s: %v\n%s", timeout, why, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
