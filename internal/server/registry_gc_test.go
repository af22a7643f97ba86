//go:build unix

package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/registry"
)

// While `gpuaas registry gc` holds the embedded registry's storage (its
// exclusive flock on the lock file, taken here by hand), a server refuses to
// start before it has opened, let alone migrated, its database; once gc is
// done it starts, and while it runs gc is refused.
func TestServerRefusesToStartWhileRegistryGCRuns(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Defaults()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dir
	dbFile := filepath.Join(dir, "gpuaas.db")
	cfg.DatabaseURL = "sqlite://" + dbFile
	cfg.SecretKey = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	root := cfg.RegistryRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(root, ".gpuaas-registry.lock"), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = New(ctx, cfg, nil)
	if !errors.Is(err, registry.ErrStorageLocked) || !strings.Contains(err.Error(), "is being garbage-collected (gpuaas registry gc)") {
		t.Fatalf("New while gc runs: %v, want the gc refusal", err)
	}
	if _, err := os.Stat(dbFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the database was opened before the refusal (stat: %v)", err)
	}
	_ = f.Close() // gc is done

	app, err := New(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("New after gc: %v", err)
	}
	if _, err := registry.CollectGarbage(ctx, root, true, nil); !errors.Is(err, registry.ErrStorageLocked) {
		t.Fatalf("gc while a server is up: %v, want ErrStorageLocked", err)
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.CollectGarbage(ctx, root, true, nil); err != nil {
		t.Fatalf("gc after the server closed: %v", err)
	}
}
