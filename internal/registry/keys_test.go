package registry

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestSigningKeyPEM(t *testing.T) {
	t.Parallel()
	for _, alg := range []KeyAlgorithm{EdDSA, ES256} {
		k, err := GenerateSigningKey(alg)
		if err != nil {
			t.Fatal(err)
		}
		pemBytes, err := k.MarshalPEM()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseSigningKeyPEM(pemBytes)
		if err != nil {
			t.Fatal(err)
		}
		if back.KeyID() != k.KeyID() || back.Algorithm() != alg {
			t.Fatalf("%s: round trip kid %s/%s", alg, back.KeyID(), k.KeyID())
		}
	}
	if _, err := GenerateSigningKey("RS256"); err == nil {
		t.Fatal("RS256 accepted")
	}
	if _, err := ParseSigningKeyPEM([]byte("not pem")); err == nil {
		t.Fatal("garbage accepted")
	}
}

func TestLoadOrCreateSigningKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys", "registry.pem")
	k1, err := LoadOrCreateSigningKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	k2, err := LoadOrCreateSigningKey(path)
	if err != nil || k2.KeyID() != k1.KeyID() {
		t.Fatalf("reload: %v %v", k2, err)
	}
}

func TestJWKS(t *testing.T) {
	t.Parallel()
	a, _ := GenerateSigningKey(EdDSA)
	b, _ := GenerateSigningKey(ES256)
	ks, err := NewKeySet(a, b.Public(), a.Public())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ks.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 || set.Keys[0]["kid"] != a.KeyID() || set.Keys[1]["kid"] != b.KeyID() ||
		set.Keys[0]["kty"] != "OKP" || set.Keys[1]["kty"] != "EC" || set.Keys[1]["y"] == "" {
		t.Fatalf("jwks = %s", raw)
	}
}
