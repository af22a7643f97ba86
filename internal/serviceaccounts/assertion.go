package serviceaccounts

import (
	"github.com/gpuaas/gpuaas/internal/assertion"
)

// MaxAssertionBytes bounds an assertion before any parsing.
const MaxAssertionBytes = assertion.MaxBytes

// Assertion is a structurally valid, not yet verified service-account
// assertion: kid names the key, iss = sub the account.
type Assertion = assertion.Assertion

// assertionRules are what a service-account assertion must satisfy: either
// key algorithm the accounts accept, and always a kid (an account may hold
// up to three active keys).
var assertionRules = assertion.Rules{Algorithms: []string{AlgEdDSA, AlgES256}, RequireKeyID: true,
	MaxLifetime: MaxAssertionLifetime, Issuer: "service account id"}

// ParseAssertion checks the shape of an assertion without trusting it (see
// assertion.Parse); Exchange checks signature, audience, clock and replay.
func ParseAssertion(raw string) (Assertion, error) { return assertion.Parse(raw, assertionRules) }

var (
	grantError = assertion.GrantError
	reasonOf   = assertion.ReasonOf
)
