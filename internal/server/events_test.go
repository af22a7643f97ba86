package server

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The NATS password is minted once (0600) and read back; an empty or blank
// file, which no client can ever have used, is treated as missing: a new
// password replaces it, with a warning, instead of failing every start.
func TestLoadOrCreateSecret(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p := filepath.Join(dir, "nats.password")
	first, err := loadOrCreateSecret(p, log)
	if err != nil || len(first) != 48 {
		t.Fatalf("minted %q %v", first, err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file %v %v", fi, err)
	}
	if again, err := loadOrCreateSecret(p, log); err != nil || again != first {
		t.Fatalf("read back %q %v, want %q", again, err, first)
	}
	if logs.Len() != 0 {
		t.Fatalf("logged on a normal start: %s", logs.String())
	}
	for _, empty := range []string{"", "\n", "  \n"} {
		logs.Reset()
		if err := os.WriteFile(p, []byte(empty), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := loadOrCreateSecret(p, log)
		if err != nil || s == "" {
			t.Fatalf("with the file holding %q: %q %v", empty, s, err)
		}
		if b, _ := os.ReadFile(p); strings.TrimSpace(string(b)) != s {
			t.Fatalf("the file holds %q, the server uses %q", b, s)
		}
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), p) {
			t.Fatalf("no warning naming the file: %q", logs.String())
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("left in the data dir: %v", ents)
	}
}
