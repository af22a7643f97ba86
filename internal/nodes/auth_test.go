package nodes_test

import (
	"context"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// A node's token exchange refuses every assertion an attacker could try —
// expired, tampered, for another audience, signed with another node's key,
// naming a key that is not the node's, unknown issuer, a symmetric
// algorithm, an over-long lifetime, a replay, a kid that is not text —
// each with its own reason, and each leaves a failure audit row with it.
func TestNodeAssertionRefusals(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	a := join(t, s, admin, "gpu-a", 0)
	b := join(t, s, admin, "gpu-b", 0)
	sign := func(key ed25519.PrivateKey, kid string, c jwt.RegisteredClaims) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		raw, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	now := time.Now()
	claims := func(iss, aud string, iat, exp time.Time) jwt.RegisteredClaims {
		return jwt.RegisteredClaims{Issuer: iss, Subject: iss, Audience: jwt.ClaimStrings{aud}, IssuedAt: jwt.NewNumericDate(iat),
			ExpiresAt: jwt.NewNumericDate(exp), ID: uuid.NewString()}
	}
	valid := claims(a.id, a.tokURL, now, now.Add(time.Minute))
	good := sign(a.priv, a.keyID, valid)
	head, rest, _ := strings.Cut(good, ".")
	_, sig, _ := strings.Cut(rest, ".")
	other := claims(a.id, a.tokURL, now, now.Add(time.Minute))
	otherPayload := strings.Split(sign(a.priv, a.keyID, other), ".")[1]
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(a.id, a.tokURL, now, now.Add(time.Minute)))
	hsRaw, _ := hs.SignedString([]byte("guessable"))
	replayed := sign(a.priv, a.keyID, claims(a.id, a.tokURL, now, now.Add(time.Minute)))
	s.Anonymous().Do("POST", "/api/v1/nodes/token", nodeapi.TokenRequest{Assertion: replayed}).Want(t, 200)
	// A replica whose clock runs ahead of the others by almost the skew
	// purges used ids while they still accept the assertion (until
	// exp+skew by their clocks): the replay below must still be refused.
	if err := s.DB.Queries().PurgeExpiredNodeAssertionIDs(context.Background(), now.Add(time.Minute).Add(2*nodes.ClockSkew-time.Second)); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ name, assertion, reason string }{
		{"expired", sign(a.priv, a.keyID, claims(a.id, a.tokURL, now.Add(-10*time.Minute), now.Add(-5*time.Minute))), "assertion_expired"},
		{"tampered payload", head + "." + otherPayload + "." + sig, "invalid_signature"},
		{"another audience", sign(a.priv, a.keyID, claims(a.id, "https://evil.example/token", now, now.Add(time.Minute))), "invalid_audience"},
		{"another node's key", sign(b.priv, "", valid), "invalid_signature"},
		{"another node's kid", sign(a.priv, b.keyID, valid), "unknown_key"},
		{"unknown node", sign(a.priv, "", claims(uuid.NewString(), a.tokURL, now, now.Add(time.Minute))), "unknown_node"},
		{"symmetric algorithm", hsRaw, "unsupported_algorithm"},
		{"over-long lifetime", sign(a.priv, a.keyID, claims(a.id, a.tokURL, now, now.Add(2*time.Hour))), "invalid_lifetime"},
		{"replayed", replayed, "replayed_assertion"},
		{"not a JWT", "not.a.jwt", "malformed_assertion"},
		{"kid not text", sign(a.priv, a.keyID+"\x00", valid), "invalid_encoding"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := s.Anonymous().Do("POST", "/api/v1/nodes/token", nodeapi.TokenRequest{Assertion: c.assertion}).Want(t, 400)
			errObj, _ := r.JSON["error"].(map[string]any)
			details, _ := errObj["details"].(map[string]any)
			if c.reason == "invalid_encoding" {
				if r.ErrorCode() != c.reason {
					t.Fatalf("want invalid_encoding, got %s", r.Body)
				}
			} else if r.ErrorCode() != "invalid_grant" || details["reason"] != c.reason {
				t.Fatalf("want invalid_grant/%s, got %s", c.reason, r.Body)
			}
			evs, _, err := s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{CorrelationID: r.Header.Get("X-Request-ID")}, store.Page{})
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 1 || evs[0].Action != "node.token" || evs[0].Outcome != "failure" || evs[0].Reason != c.reason {
				t.Fatalf("want one node.token failure audit row with reason %s, got %+v", c.reason, evs)
			}
		})
	}
	// The untouched assertion still works: the refusals above were its variants.
	s.Anonymous().Do("POST", "/api/v1/nodes/token", nodeapi.TokenRequest{Assertion: good}).Want(t, 200)
}
