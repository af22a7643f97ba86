package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
)

// A server whose data dir holds an empty nats.password (a crash while an
// older build wrote it) starts with the embedded NATS listener: the empty
// file counts as missing and gets a new password.
func TestStartsWithAnEmptyNATSPassword(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "nats.password")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := servertest.Start(t, "sqlite", func(c *config.Config) {
		c.DataDir = dir
		c.DatabaseURL = "sqlite://" + filepath.Join(dir, "gpuaas.db")
		c.Events.NATSListen = "127.0.0.1:-1"
	})
	if b, err := os.ReadFile(p); err != nil || strings.TrimSpace(string(b)) == "" {
		t.Fatalf("nats.password after start: %q %v", b, err)
	}
	if !strings.Contains(s.Logs.String(), "the secret file is empty") {
		t.Fatal("no log line says the empty password file was replaced")
	}
}
