package main_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A second `gpuaas dev` on a data dir in use refuses at once, names the
// running instance, and leaves the first one's files as they were; a busy
// port is reported before anything is migrated.
func TestSecondDevOnOneDataDirRefuses(t *testing.T) {
	bin := buildBinary(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	port := freePort(t)
	first, _ := startDev(t, bin, dataDir, port)
	credsPath := filepath.Join(dataDir, "dev-credentials.json")
	before, err := os.ReadFile(credsPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, "dev", "--data-dir", dataDir, "--listen", "127.0.0.1:"+strconv.Itoa(freePort(t))).CombinedOutput()
	took := time.Since(start)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("second dev: err %v after %v (want a non-zero exit at once)\n%s", err, took, out)
	}
	t.Logf("second dev refused after %v", took)
	if !strings.Contains(string(out), "is held by gpuaas dev (pid "+strconv.Itoa(first.cmd.Process.Pid)) {
		t.Fatalf("refusal does not name the running instance:\n%s", out)
	}
	after, err := os.ReadFile(credsPath)
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("the first instance's credentials changed: %v", err)
	}

	// Another data dir, but the first one's port: refused before the new
	// data dir gets a database.
	other := filepath.Join(t.TempDir(), "other")
	out, err = exec.CommandContext(ctx, bin, "dev", "--data-dir", other, "--listen", "127.0.0.1:"+strconv.Itoa(port)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cannot listen on 127.0.0.1:"+strconv.Itoa(port)) {
		t.Fatalf("busy port: err %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(other, "gpuaas.db")); !os.IsNotExist(err) {
		t.Fatalf("a database was created before the port was checked: %v", err)
	}
	first.stop(t)
}
