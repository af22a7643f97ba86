package serviceaccounts

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// MaxAssertionBytes bounds an assertion before any parsing: a real one is a
// few hundred bytes.
const MaxAssertionBytes = 8 << 10

// maxClaimLen bounds kid, iss and jti.
const maxClaimLen = 128

// Assertion is a structurally valid, not yet verified JWT assertion.
type Assertion struct {
	KeyID     string // kid header: the service-account key_id
	Algorithm string // alg header: EdDSA | ES256
	Issuer    string // iss = sub: the service-account id
	Audience  []string
	JTI       string
	IssuedAt  time.Time
	ExpiresAt time.Time

	signingString string
	signature     []byte
}

// grantError is the refusal of an exchange: code invalid_grant, a message
// that says what to fix, and a machine-readable reason also written to the
// audit row.
func grantError(reason, format string, args ...any) *errdefs.Error {
	return errdefs.Invalid("invalid_grant", format, args...).WithDetails(map[string]any{"reason": reason})
}

// reasonOf returns the refusal reason of err, if it is a grant error.
func reasonOf(err error) string {
	if e, ok := errdefs.As(err); ok && e.Details != nil {
		if r, ok := e.Details["reason"].(string); ok {
			return r
		}
	}
	return ""
}

var unverifiedParser = jwt.NewParser()

// ParseAssertion checks the shape of an assertion without trusting it: size,
// JWS compact form, algorithm, kid, iss = sub, jti, iat and exp present with
// exp - iat at most one hour, an audience. Signature, audience value, clock
// and replay are checked by Exchange.
func ParseAssertion(raw string) (Assertion, error) {
	if raw == "" {
		return Assertion{}, grantError("missing_assertion", "send the signed JWT in the assertion field")
	}
	if len(raw) > MaxAssertionBytes {
		return Assertion{}, grantError("assertion_too_large", "the assertion is larger than %d bytes; a service-account assertion is a few hundred bytes", MaxAssertionBytes)
	}
	if strings.Count(raw, ".") != 2 {
		return Assertion{}, grantError("malformed_assertion", "the assertion is not a compact JWS (header.payload.signature)")
	}
	var c jwt.RegisteredClaims
	tok, parts, err := unverifiedParser.ParseUnverified(raw, &c)
	if tok == nil || tok.Header == nil {
		return Assertion{}, errMalformed()
	}
	// The header decoded: name a wrong algorithm before any other defect.
	alg, _ := tok.Header["alg"].(string)
	if alg != AlgEdDSA && alg != AlgES256 {
		return Assertion{}, grantError("unsupported_algorithm", "the assertion must be signed with EdDSA or ES256 (alg header), matching the key's algorithm")
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
	if kid == "" || len(kid) > maxClaimLen {
		return Assertion{}, grantError("missing_kid", "the assertion's kid header must name the key_id of the service-account key that signed it")
	}
	if c.Issuer == "" || len(c.Issuer) > maxClaimLen || c.Subject != c.Issuer {
		return Assertion{}, grantError("invalid_issuer", "the assertion's iss and sub must both be the service account id")
	}
	if c.ID == "" || len(c.ID) > maxClaimLen {
		return Assertion{}, grantError("missing_jti", "the assertion needs a jti claim (a fresh random id, at most %d characters) for every exchange", maxClaimLen)
	}
	if len(c.Audience) == 0 {
		return Assertion{}, grantError("missing_audience", "the assertion's aud must be this server's token endpoint URL")
	}
	if c.IssuedAt == nil || c.ExpiresAt == nil {
		return Assertion{}, grantError("missing_time_claims", "the assertion needs iat and exp claims (seconds since the epoch)")
	}
	iat, exp := c.IssuedAt.Time, c.ExpiresAt.Time
	if !exp.After(iat) || exp.Sub(iat) > MaxAssertionLifetime {
		return Assertion{}, grantError("invalid_lifetime", "the assertion's exp must be after iat and at most one hour after it")
	}
	if len(tok.Signature) == 0 {
		return Assertion{}, grantError("missing_signature", "the assertion is not signed")
	}
	return Assertion{
		KeyID: kid, Algorithm: alg, Issuer: c.Issuer, Audience: c.Audience, JTI: c.ID, IssuedAt: iat, ExpiresAt: exp,
		signingString: parts[0] + "." + parts[1], signature: tok.Signature,
	}, nil
}

func errMalformed() error {
	return grantError("malformed_assertion", "the assertion is not a well-formed JWT: each part must be base64url-encoded JSON, signed")
}

// verify checks the signature with a stored public key of algorithm alg.
func (a Assertion) verify(alg, publicKeyPEM string) error {
	if alg != a.Algorithm {
		return grantError("algorithm_mismatch", "the assertion is signed with %s but the key is %s", a.Algorithm, alg)
	}
	pub, err := publicKeyOf(publicKeyPEM)
	if err != nil {
		return err
	}
	if err := jwt.GetSigningMethod(alg).Verify(a.signingString, a.signature, pub); err != nil {
		return grantError("invalid_signature", "the assertion's signature does not verify with key %s; sign it with that key's private half", a.KeyID)
	}
	return nil
}
