// Package assertion checks the JWT bearer assertions (RFC 7523) that
// machine identities — service accounts and node agents — sign with their
// own private keys and exchange for short-lived access tokens. It owns the
// checks both exchanges share: shape before trust, algorithm, signature,
// audience, clock, lifetime. What a key belongs to, whether it is still
// active, and replay (single-use jti) are the callers' business.
package assertion

import (
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// MaxBytes bounds an assertion before any parsing: a real one is a few
// hundred bytes.
const MaxBytes = 8 << 10

// maxClaimLen bounds kid, iss and jti.
const maxClaimLen = 128

// Rules are what one kind of identity's assertions must satisfy.
type Rules struct {
	// Algorithms are the accepted alg headers (jwt names: EdDSA, ES256).
	Algorithms []string
	// RequireKeyID demands a kid header naming the signing key.
	RequireKeyID bool
	// MaxLifetime caps exp - iat.
	MaxLifetime time.Duration
	// Issuer names what iss = sub must be, for messages ("service account id").
	Issuer string
}

// Assertion is a structurally valid, not yet verified assertion.
type Assertion struct {
	KeyID     string // kid header ("" when the rules allow none)
	Algorithm string // alg header
	Issuer    string // iss = sub
	Audience  []string
	JTI       string
	IssuedAt  time.Time
	ExpiresAt time.Time
	NotBefore time.Time // zero when the assertion has no nbf

	signingString string
	signature     []byte
}

// GrantError is the refusal of an exchange: code invalid_grant, a message
// that says what to fix, and a machine-readable reason the caller also
// writes to the audit row.
func GrantError(reason, format string, args ...any) *errdefs.Error {
	return errdefs.Invalid("invalid_grant", format, args...).WithDetails(map[string]any{"reason": reason})
}

// ReasonOf returns why an exchange was refused, for its failure audit
// row: a grant error's reason, or the code of any other error the request
// itself caused (an assertion whose kid, iss or jti is not text); "" for a
// failure of the server's own (the database), which is no refusal.
func ReasonOf(err error) string {
	e, ok := errdefs.As(err)
	if !ok {
		return ""
	}
	if r, ok := e.Details["reason"].(string); ok {
		return r
	}
	if e.Kind == errdefs.KindInvalidArgument {
		return e.Code
	}
	return ""
}

var unverifiedParser = jwt.NewParser()

// Parse checks the shape of an assertion without trusting it: size, JWS
// compact form, algorithm, kid, iss = sub, jti, iat and exp present with
// exp - iat within the rules' lifetime, an audience, a signature. The
// signature, the audience's value, the clock and replay are checked later.
func Parse(raw string, r Rules) (Assertion, error) {
	if raw == "" {
		return Assertion{}, GrantError("missing_assertion", "send the signed JWT in the assertion field")
	}
	if len(raw) > MaxBytes {
		return Assertion{}, GrantError("assertion_too_large", "the assertion is larger than %d bytes; a real one is a few hundred bytes", MaxBytes)
	}
	if strings.Count(raw, ".") != 2 {
		return Assertion{}, GrantError("malformed_assertion", "the assertion is not a compact JWS (header.payload.signature)")
	}
	var c jwt.RegisteredClaims
	tok, parts, err := unverifiedParser.ParseUnverified(raw, &c)
	if tok == nil || tok.Header == nil {
		return Assertion{}, errMalformed()
	}
	// The header decoded: name a wrong algorithm before any other defect.
	alg, _ := tok.Header["alg"].(string)
	if !slices.Contains(r.Algorithms, alg) {
		return Assertion{}, GrantError("unsupported_algorithm", "the assertion must be signed with %s (alg header), matching the key's algorithm", strings.Join(r.Algorithms, " or "))
	}
	if err != nil {
		return Assertion{}, errMalformed()
	}
	kid, _ := tok.Header["kid"].(string)
	for _, v := range []string{kid, c.Issuer, c.ID} {
		if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return Assertion{}, errdefs.Invalid("invalid_encoding", "the assertion's kid, iss and jti must be valid UTF-8 text without NUL characters")
		}
	}
	if len(kid) > maxClaimLen || (r.RequireKeyID && kid == "") {
		return Assertion{}, GrantError("missing_kid", "the assertion's kid header must name the key_id of the key that signed it")
	}
	if c.Issuer == "" || len(c.Issuer) > maxClaimLen || c.Subject != c.Issuer {
		return Assertion{}, GrantError("invalid_issuer", "the assertion's iss and sub must both be the %s", r.Issuer)
	}
	if c.ID == "" || len(c.ID) > maxClaimLen {
		return Assertion{}, GrantError("missing_jti", "the assertion needs a jti claim (a fresh random id, at most %d characters) for every exchange", maxClaimLen)
	}
	if len(c.Audience) == 0 {
		return Assertion{}, GrantError("missing_audience", "the assertion's aud must be this server's token endpoint URL")
	}
	if c.IssuedAt == nil || c.ExpiresAt == nil {
		return Assertion{}, GrantError("missing_time_claims", "the assertion needs iat and exp claims (seconds since the epoch)")
	}
	iat, exp := c.IssuedAt.Time, c.ExpiresAt.Time
	if !exp.After(iat) || exp.Sub(iat) > r.MaxLifetime {
		return Assertion{}, GrantError("invalid_lifetime", "the assertion's exp must be after iat and at most %s after it", r.MaxLifetime)
	}
	if len(tok.Signature) == 0 {
		return Assertion{}, GrantError("missing_signature", "the assertion is not signed")
	}
	var nbf time.Time
	if c.NotBefore != nil {
		nbf = c.NotBefore.Time
	}
	return Assertion{
		KeyID: kid, Algorithm: alg, Issuer: c.Issuer, Audience: c.Audience, JTI: c.ID, IssuedAt: iat, ExpiresAt: exp,
		NotBefore: nbf, signingString: parts[0] + "." + parts[1], signature: tok.Signature,
	}, nil
}

func errMalformed() error {
	return GrantError("malformed_assertion", "the assertion is not a well-formed JWT: each part must be base64url-encoded JSON, signed")
}

// CheckClaims checks the audience (exactly tokenURL) and the clock: iat and
// nbf (when sent) not in the future and exp not past, each within skew. An
// assertion must not be accepted before its nbf (RFC 7519 4.1.5, RFC 7523
// 3).
func (a Assertion) CheckClaims(now time.Time, tokenURL string, skew time.Duration) error {
	if len(a.Audience) != 1 || a.Audience[0] != tokenURL {
		return GrantError("invalid_audience", "the assertion's aud must be exactly %q, this server's token endpoint", tokenURL)
	}
	if a.IssuedAt.After(now.Add(skew)) {
		return GrantError("issued_in_future", "the assertion's iat is in the future; check the clock of the signing machine (tolerance %s)", skew)
	}
	if !a.NotBefore.IsZero() && a.NotBefore.After(now.Add(skew)) {
		return GrantError("not_yet_valid", "the assertion's nbf is in the future; it cannot be exchanged before %s (tolerance %s)", a.NotBefore.UTC().Format(time.RFC3339), skew)
	}
	if now.After(a.ExpiresAt.Add(skew)) {
		return GrantError("assertion_expired", "the assertion expired at %s; sign a fresh one for every exchange", a.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// RememberUntil is how long a replica must keep this assertion's jti once
// it was exchanged: until no replica can accept the assertion any more.
// Each accepts it until exp+skew by its own clock, and the replica that
// purges the jti may run up to skew ahead of the one still accepting it (the
// tolerance the platform allows between clocks), so the jti is kept until
// exp+2×skew by the purger's clock. With exp+skew, a fast replica's purge
// handed a slow one up to skew in which the same assertion passed again.
func (a Assertion) RememberUntil(skew time.Duration) time.Time {
	return a.ExpiresAt.Add(2 * skew)
}

// Verify checks the signature with pub, a stored public key of algorithm
// alg; keyName says which key in the message.
func (a Assertion) Verify(alg string, pub any, keyName string) error {
	if alg != a.Algorithm {
		return GrantError("algorithm_mismatch", "the assertion is signed with %s but the key is %s", a.Algorithm, alg)
	}
	if err := jwt.GetSigningMethod(alg).Verify(a.signingString, a.signature, pub); err != nil {
		return GrantError("invalid_signature", "the assertion's signature does not verify with %s; sign it with that key's private half", keyName)
	}
	return nil
}
