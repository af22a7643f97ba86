package assertion

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const tokenURL = "https://gpuaas.example/v1/node-token"

var (
	testRules = Rules{Algorithms: []string{"EdDSA"}, RequireKeyID: true, MaxLifetime: time.Hour, Issuer: "node id"}
	epoch     = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

func sign(t testing.TB, priv ed25519.PrivateKey, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	tok.Header["kid"] = "k1"
	raw, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func claims(now time.Time) jwt.MapClaims {
	return jwt.MapClaims{"iss": "n1", "sub": "n1", "aud": tokenURL, "jti": "j1",
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
}

func TestAValidAssertionPasses(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	a, err := Parse(sign(t, priv, claims(epoch)), testRules)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Verify("EdDSA", pub, "the node's key"); err != nil {
		t.Fatal(err)
	}
	if err := a.CheckClaims(epoch, tokenURL, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// An nbf in the future (beyond the skew) is refused: RFC 7519 says such a
// token MUST NOT be accepted for processing.
func TestCheckClaimsRefusesAnAssertionBeforeItsNotBefore(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	c := claims(epoch)
	c["nbf"] = epoch.Add(4 * time.Minute).Unix()
	a, err := Parse(sign(t, priv, c), testRules)
	if err != nil {
		t.Fatal(err)
	}
	err = a.CheckClaims(epoch, tokenURL, time.Minute)
	if r := ReasonOf(err); r != "not_yet_valid" {
		t.Fatalf("nbf 4 minutes ahead: reason %q (%v), want not_yet_valid", r, err)
	}
	if err := a.CheckClaims(epoch.Add(3*time.Minute+30*time.Second), tokenURL, time.Minute); err != nil {
		t.Fatalf("within the skew of nbf: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	with := func(k string, v any) string {
		c := claims(epoch)
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return sign(t, priv, c)
	}
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(epoch))
	hs.Header["kid"] = "k1"
	hsRaw, _ := hs.SignedString([]byte(pub))
	none := jwt.NewWithClaims(jwt.SigningMethodNone, claims(epoch))
	none.Header["kid"] = "k1"
	noneRaw, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	for _, tc := range []struct{ name, raw, reason string }{
		{"hs256 with the public key", hsRaw, "unsupported_algorithm"},
		{"alg none", noneRaw, "unsupported_algorithm"},
		{"too long-lived", with("exp", epoch.Add(2*time.Hour).Unix()), "invalid_lifetime"},
		{"no exp", with("exp", nil), "missing_time_claims"},
		{"no jti", with("jti", nil), "missing_jti"},
		{"sub not iss", with("sub", "n2"), "invalid_issuer"},
		{"no aud", with("aud", nil), "missing_audience"},
	} {
		if _, err := Parse(tc.raw, testRules); ReasonOf(err) != tc.reason {
			t.Errorf("%s: %v, want reason %s", tc.name, err, tc.reason)
		}
	}
	for _, tc := range []struct {
		name   string
		raw    string
		now    time.Time
		reason string
	}{
		{"other audience", with("aud", "https://evil.example/token"), epoch, "invalid_audience"},
		{"two audiences", with("aud", []string{tokenURL, "x"}), epoch, "invalid_audience"},
		{"expired", sign(t, priv, claims(epoch)), epoch.Add(7 * time.Minute), "assertion_expired"},
		{"issued in the future", sign(t, priv, claims(epoch)), epoch.Add(-2 * time.Minute), "issued_in_future"},
	} {
		a, err := Parse(tc.raw, testRules)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := a.CheckClaims(tc.now, tokenURL, time.Minute); ReasonOf(err) != tc.reason {
			t.Errorf("%s: %v, want reason %s", tc.name, err, tc.reason)
		}
	}
	a, _ := Parse(sign(t, priv, claims(epoch)), testRules)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	if err := a.Verify("EdDSA", otherPub, "k"); ReasonOf(err) != "invalid_signature" {
		t.Errorf("another key: %v", err)
	}
	if err := a.Verify("ES256", pub, "k"); ReasonOf(err) != "algorithm_mismatch" {
		t.Errorf("another algorithm: %v", err)
	}
}

// FuzzParse: whatever is sent, Parse answers with a grant error or an
// assertion within the rules, and never panics.
func FuzzParse(f *testing.F) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	c := claims(epoch)
	c["nbf"] = epoch.Unix()
	f.Add(sign(f, priv, c))
	f.Add("e30.e30.")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, raw string) {
		a, err := Parse(raw, testRules)
		if err != nil {
			if ReasonOf(err) == "" && err.Error() == "" {
				t.Fatalf("an error without a message: %#v", err)
			}
			return
		}
		if a.Issuer == "" || a.JTI == "" || a.KeyID == "" || len(a.Audience) == 0 || !a.ExpiresAt.After(a.IssuedAt) ||
			a.ExpiresAt.Sub(a.IssuedAt) > testRules.MaxLifetime {
			t.Fatalf("accepted %q as %+v", raw, a)
		}
		_ = a.CheckClaims(epoch, tokenURL, time.Minute)
	})
}
