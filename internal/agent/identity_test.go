package agent

import (
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
