package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The key is made once (0600) and read back the same; assertions carry what
// the server checks: iss = sub = node id, aud = token URL, kid, a short
// life and a fresh jti each time.
func TestKeyAndAssertion(t *testing.T) {
	dir := t.TempDir()
	priv, pub, err := loadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, keyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v %v", fi, err)
	}
	priv2, pub2, err := loadOrCreateKey(dir)
	if err != nil || !priv.Equal(priv2) || pub != pub2 {
		t.Fatalf("key changed on reload: %v", err)
	}
	id := identity{NodeID: "node-1", KeyID: "kid-1", TokenURL: "http://x/api/v1/nodes/token", priv: priv}
	tk := &tokens{id: &id}
	seen := map[string]bool{}
	for range 3 {
		raw, err := tk.assertion()
		if err != nil {
			t.Fatal(err)
		}
		var c jwt.RegisteredClaims
		tok, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return priv.Public(), nil },
			jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithAudience(id.TokenURL))
		if err != nil {
			t.Fatal(err)
		}
		if c.Issuer != "node-1" || c.Subject != "node-1" || tok.Header["kid"] != "kid-1" || c.ExpiresAt.Sub(c.IssuedAt.Time) > 5*time.Minute || c.ID == "" || seen[c.ID] {
			t.Fatalf("claims %+v header %v", c, tok.Header)
		}
		seen[c.ID] = true
	}
}

// node.key and node.json are replaced whole (a new file renamed over the
// old, never written in place), and a write that fails leaves the old file
// and no temporary file beside it.
func TestIdentityFilesWrittenAtomically(t *testing.T) {
	dir := t.TempDir()
	id := identity{NodeID: "node-1", KeyID: "kid-1", TokenURL: "http://x/t", Server: "http://x"}
	if err := saveIdentity(dir, id); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, identityFile)
	if err := os.Link(p, filepath.Join(dir, "old.link")); err != nil {
		t.Fatal(err)
	}
	id.NodeID = "node-2"
	if err := saveIdentity(dir, id); err != nil {
		t.Fatal(err)
	}
	if old, _ := loadIdentityFile(t, filepath.Join(dir, "old.link")); old != "node-1" {
		t.Fatalf("node.json was written in place: the old file now names %q", old)
	}
	if got, ok, err := loadIdentity(dir); err != nil || !ok || got.NodeID != "node-2" {
		t.Fatalf("reload: %+v %v %v", got, ok, err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("node.json %v %v", fi, err)
	}
	// A directory in node.json's place: the write fails and leaves nothing.
	kdir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(kdir, identityFile, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := saveIdentity(kdir, id); err == nil {
		t.Fatal("node.json was written over a directory")
	}
	ents, _ := os.ReadDir(kdir)
	if len(ents) != 1 || ents[0].Name() != identityFile {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("a failed write left %v in the data dir", names)
	}
}

func loadIdentityFile(t *testing.T, path string) (string, error) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var id identity
	err = json.Unmarshal(b, &id)
	return id.NodeID, err
}
