package main_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// `gpuaas migrate` then `gpuaas server` on a real PostgreSQL, configured
// through GPUAAS_* environment variables, ready and stopping cleanly.
func TestServerOnPostgres(t *testing.T) {
	url := storetest.URL(t, store.Postgres)
	bin := buildBinary(t)

	pending, err := exec.Command(bin, "migrate", "--check", "--database-url", url).CombinedOutput()
	want := strconv.Itoa(store.LatestVersion(store.Postgres)) + " migration(s) to apply"
	if err != nil || !strings.Contains(string(pending), want) {
		t.Fatalf("migrate --check on an empty database: %v\n%s\nwant %q", err, pending, want)
	}
	out, err := exec.Command(bin, "migrate", "--database-url", url).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "postgres schema is at version") {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	current, err := exec.Command(bin, "migrate", "--check", "--database-url", url).CombinedOutput()
	if err != nil || !strings.Contains(string(current), "nothing to apply") {
		t.Fatalf("migrate --check after migrate: %v\n%s", err, current)
	}
	again, err := exec.Command(bin, "migrate", "--database-url", url).CombinedOutput()
	if err != nil || !strings.Contains(string(again), "applied 0 migration") {
		t.Fatalf("second migrate should apply nothing: %v\n%s", err, again)
	}

	port := freePort(t)
	cmd := exec.Command(bin, "server", "--auto-migrate=false")
	cmd.Env = append(cmd.Environ(),
		"GPUAAS_DATABASE_URL="+url,
		"GPUAAS_LISTEN=127.0.0.1:"+strconv.Itoa(port),
		"GPUAAS_SECRET_KEY="+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32)),
	)
	logs := &testbin.Output{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	ready := false
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				ready = true
				break
			}
		}
	}
	if !ready {
		t.Fatalf("server not ready:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `"database":"postgres"`) {
		t.Fatalf("server did not log its database:\n%s", logs.String())
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("server exit on SIGTERM: %v\n%s", err, logs.String())
	}
}

func TestServerRefusesMissingConfig(t *testing.T) {
	bin := buildBinary(t)
	cmd := exec.Command(bin, "server")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("server started with no database and no master key")
	}
	for _, want := range []string{"--database-url", "master key"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("error output does not name %s:\n%s", want, out)
		}
	}
}
