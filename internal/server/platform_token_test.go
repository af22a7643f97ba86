package server

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gpuaas/gpuaas/internal/iam"
)

// The gateway keeps from apps every token that is the platform's or claims
// to be: one of a key this replica does not trust (just rotated in on
// another replica, or retired here) included. An app's own bearer tokens
// pass.
func TestIsPlatformToken(t *testing.T) {
	known, unknown := newKey(t), newKey(t)
	keyfunc := func(tok *jwt.Token) (any, error) {
		if tok.Header["kid"] == "known" {
			return known.Public(), nil
		}
		return nil, jwt.ErrTokenUnverifiable
	}
	sign := func(kid string, key ed25519.PrivateKey, iss string, aud ...string) string {
		t.Helper()
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{Issuer: iss, Audience: aud,
			ExpiresAt: jwt.NewNumericDate(time.Unix(1, 0))}) // long expired: still the platform's
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	is := isPlatformToken(keyfunc)
	for _, c := range []struct {
		name, tok string
		want      bool
	}{
		{"signed by a key this replica trusts", sign("known", known, "someone", "else"), true},
		{"the platform's by its claims, of a key this replica does not know", sign("rotated-in", unknown, iam.TokenIssuer, iam.TokenAudience), true},
		{"the app's own JWT", sign("app", unknown, "https://my-app.example", "my-app"), false},
		{"the platform's issuer for another audience", sign("app", unknown, iam.TokenIssuer, "my-app"), false},
		{"an OpenAI-style key", "sk-abc123", false},
	} {
		if got := is(context.Background(), c.tok); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
