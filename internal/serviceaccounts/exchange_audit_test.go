package serviceaccounts_test

import (
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// Every refused exchange leaves a failure audit row, also one refused
// before any grant check because the assertion's kid, iss or jti is not
// text (invalid_encoding): such probing must not go unrecorded.
func TestExchangeRefusedForItsEncodingIsAudited(t *testing.T) {
	forEachDialect(t, func(t *testing.T, e *env) {
		_, kf := e.createSA(t, e.admin, e.Creds.ProjectID, map[string]any{"name": "A", "slug": "sa-a"})
		for name, mod := range map[string]claimsMod{
			"kid": func(_ *jwt.RegisteredClaims, h map[string]any) { h["kid"] = kf.KeyID + "\x00" },
			"jti": func(c *jwt.RegisteredClaims, _ map[string]any) { c.ID = "jti\x00" },
		} {
			t.Run(name, func(t *testing.T) {
				r := e.exchange(e.craft(t, kf, mod)).Want(t, 400)
				if r.ErrorCode() != "invalid_encoding" {
					t.Fatalf("want invalid_encoding, got %s", r.Body)
				}
				e.auditedFailure(t, r, "invalid_encoding")
			})
		}
	})
}
