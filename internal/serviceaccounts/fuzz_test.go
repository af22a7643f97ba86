package serviceaccounts_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
)

// FuzzParseAssertion feeds arbitrary bytes to the parser of untrusted
// assertions: it must never panic, and whatever it accepts must hold the
// bounds the exchange relies on.
func FuzzParseAssertion(f *testing.F) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(priv)
	kf := client.KeyFile{ServiceAccountID: "0190a0b0-0000-7000-8000-000000000001", KeyID: "0190a0b0-0000-7000-8000-000000000002",
		PrivateKeyPEM: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))}
	valid, err := client.SignAssertion(kf, "http://127.0.0.1:8080/api/v1/auth/service-account/token", time.Unix(1_800_000_000, 0))
	if err != nil {
		f.Fatal(err)
	}
	if _, err := serviceaccounts.ParseAssertion(valid); err != nil {
		f.Fatalf("a valid assertion is refused: %v", err)
	}
	for _, seed := range []string{
		valid, "", ".", "..", "a.b.c", "e30.e30.", "e30.e30.e30",
		"eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.",
		"eyJhbGciOiJFZERTQSIsImtpZCI6IngifQ.eyJpc3MiOiJ4Iiwic3ViIjoieCJ9.AAAA",
		// kid with a NUL, kid with invalid UTF-8: refused as invalid_encoding.
		"eyJhbGciOiJFZERTQSIsImtpZCI6InhcdTAwMDB5In0.eyJpc3MiOiJ4Iiwic3ViIjoieCJ9.AAAA",
		"eyJhbGciOiJFZERTQSIsImtpZCI6Iv_-In0.eyJpc3MiOiJ4Iiwic3ViIjoieCJ9.AAAA",
		valid[:len(valid)/2], strings.Replace(valid, ".", "..", 1), strings.Repeat("A", 9000),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		a, err := serviceaccounts.ParseAssertion(raw)
		if err != nil {
			return
		}
		if len(raw) > serviceaccounts.MaxAssertionBytes {
			t.Fatalf("accepted %d bytes", len(raw))
		}
		for _, v := range []string{a.KeyID, a.Issuer, a.JTI} {
			if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
				t.Fatalf("accepted badly encoded id %q", v)
			}
		}
		if a.KeyID == "" || len(a.KeyID) > 128 || a.Issuer == "" || len(a.Issuer) > 128 || a.JTI == "" || len(a.JTI) > 128 {
			t.Fatalf("accepted out-of-bounds ids: %+v", a)
		}
		if a.Algorithm != serviceaccounts.AlgEdDSA && a.Algorithm != serviceaccounts.AlgES256 {
			t.Fatalf("accepted alg %q", a.Algorithm)
		}
		if !a.ExpiresAt.After(a.IssuedAt) || a.ExpiresAt.Sub(a.IssuedAt) > serviceaccounts.MaxAssertionLifetime || len(a.Audience) == 0 {
			t.Fatalf("accepted bad times or audience: %+v", a)
		}
	})
}
