package main_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// TestMain removes the binary the end-to-end tests share.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// buildBinary compiles gpuaas once for all end-to-end tests.
func buildBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpuaas-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "gpuaas")
		// -buildvcs=true: stamp the commit even where GOFLAGS turns it off.
		cmd := exec.Command("go", "build", "-buildvcs=true", "-o", binPath, ".")
		cmd.Stderr = os.Stderr
		unlock, err := testbin.LockBuilds()
		if err != nil {
			buildErr = err
			return
		}
		defer unlock()
		buildErr = cmd.Run()
	})
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return binPath
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type devProc struct {
	cmd *exec.Cmd
	out *testbin.Output
}

// startDev runs `gpuaas dev` (with extra flags) and waits for /readyz, failing after 5 s.
func startDev(t testing.TB, bin, dataDir string, port int, extra ...string) (*devProc, time.Duration) {
	t.Helper()
	out := &testbin.Output{}
	cmd := exec.Command(bin, append([]string{"dev", "--data-dir", dataDir, "--listen", "127.0.0.1:" + strconv.Itoa(port)}, extra...)...)
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &devProc{cmd: cmd, out: out}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/readyz"
	for time.Since(start) < 5*time.Second {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, time.Since(start)
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("gpuaas dev not ready within 5 s; output:\n%s", out)
	return nil, 0
}

func (p *devProc) stop(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("gpuaas dev did not exit cleanly on SIGTERM: %v\n%s", err, p.out)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("gpuaas dev did not stop within 20 s of SIGTERM")
	}
}

type devCreds struct {
	APIURL        string `json:"api_url"`
	OrgID         string `json:"org_id"`
	ProjectID     string `json:"project_id"`
	AdminEmail    string `json:"admin_email"`
	AdminPassword string `json:"admin_password"`
}

func readCreds(t *testing.T, dataDir string) devCreds {
	t.Helper()
	path := filepath.Join(dataDir, "dev-credentials.json")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("dev-credentials.json mode %v, want 0600", st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c devCreds
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// The first-run experience: `gpuaas dev` on an empty data dir is ready in
// under 5 s, its credentials file signs a client in, and a restart keeps
// every row.
func TestDevModeEndToEnd(t *testing.T) {
	bin := buildBinary(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	port := freePort(t)
	p, took := startDev(t, bin, dataDir, port)
	t.Logf("gpuaas dev ready after %v", took)
	creds := readCreds(t, dataDir)
	ctx := context.Background()
	c := client.New(creds.APIURL, "")
	if _, err := c.Login(ctx, creds.AdminEmail, creds.AdminPassword); err != nil {
		t.Fatalf("login with dev credentials: %v", err)
	}
	me, err := c.Me(ctx)
	if err != nil || me.Email != creds.AdminEmail {
		t.Fatalf("me = %+v, %v", me, err)
	}
	// The embedded OCI registry answers on the same listener and sends
	// clients to the control plane's token endpoint.
	resp, err := http.Get(creds.APIURL + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `realm="`+creds.APIURL+`/v2/token"`) {
		t.Fatalf("/v2/ = %d, challenge %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if !strings.Contains(p.out.String(), "registry:     127.0.0.1:"+strconv.Itoa(port)) {
		t.Fatalf("banner does not name the registry:\n%s", p.out.String())
	}
	var proj struct {
		ID string `json:"id"`
	}
	if err := c.Do(ctx, "POST", "/api/v1/orgs/"+creds.OrgID+"/projects", nil, map[string]string{"slug": "kept", "name": "Kept"}, &proj); err != nil {
		t.Fatal(err)
	}
	p.stop(t)

	p2, _ := startDev(t, bin, dataDir, port)
	creds2 := readCreds(t, dataDir)
	if creds2 != creds {
		t.Fatalf("restart changed the credentials: %+v vs %+v", creds2, creds)
	}
	c2 := client.New(creds.APIURL, "")
	if _, err := c2.Login(ctx, creds.AdminEmail, creds.AdminPassword); err != nil {
		t.Fatalf("login after restart: %v", err)
	}
	var got struct {
		Slug string `json:"slug"`
	}
	if err := c2.Do(ctx, "GET", "/api/v1/projects/"+proj.ID, nil, nil, &got); err != nil || got.Slug != "kept" {
		t.Fatalf("project lost across restart: %+v %v", got, err)
	}
	p2.stop(t)
}
