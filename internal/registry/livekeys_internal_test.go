package registry

import (
	"crypto"
	"slices"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
)

// A reload that hands over the keys the registry already trusts keeps its
// token controller (no JWKS file written, nothing rebuilt); a set that
// differs gets a controller of its own.
func TestLiveAccessRebuildsOnlyForOtherKeys(t *testing.T) {
	l := &liveAccess{params: configuration.Parameters{"realm": "http://x/v2/token", "service": "x", "issuer": "x",
		"signingalgorithms": []any{string(EdDSA)}}}
	key := func() *SigningKey {
		k, err := GenerateSigningKey(EdDSA)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	set := func(signing *SigningKey, older ...crypto.PublicKey) {
		t.Helper()
		ks, err := NewKeySet(signing, older...)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.set(ks); err != nil {
			t.Fatal(err)
		}
	}
	a, b := key(), key()
	set(a)
	first := l.state.Load().access
	set(a)
	if l.state.Load().access != first {
		t.Error("the same keys, read again, rebuilt the token controller")
	}
	set(b, a.Public())
	if l.state.Load().access == first || !slices.Equal(l.state.Load().keys.KeyIDs(), []string{b.KeyID(), a.KeyID()}) {
		t.Error("a rotated set did not get a token controller of its own")
	}
}
