//go:build unix

package server

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A second holder is refused at once, told who holds the dir, and leaves the
// first holder's files as they were.
func TestLockDataDirRefusesSecondInstance(t *testing.T) {
	dir := t.TempDir()
	first, err := LockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if err := first.Describe("gpuaas dev (pid 42, API http://127.0.0.1:1234)"); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "dev-credentials.json")
	if err := os.WriteFile(creds, []byte(`{"api_url":"first"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LockDataDir(dir)
	if !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("second lock: err = %v, want ErrDataDirLocked", err)
	}
	if !strings.Contains(err.Error(), "pid 42") || !strings.Contains(err.Error(), "http://127.0.0.1:1234") {
		t.Fatalf("error does not name the running instance: %v", err)
	}
	if b, _ := os.ReadFile(creds); string(b) != `{"api_url":"first"}` {
		t.Fatalf("credentials changed: %s", b)
	}
	if b, _ := os.ReadFile(lockPath(dir)); !strings.Contains(string(b), "pid 42") {
		t.Fatalf("lock file rewritten by the refused instance: %q", b)
	}
	first.Close()
	again, err := LockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.Close()
}
