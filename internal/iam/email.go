package iam

import (
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// NormalizeEmail is the one way an email address enters the system (sign-up,
// login, user creation, seeding). It applies NFKC, so full-width and other
// compatibility forms fold onto their plain letters, and lower-cases the
// address, so "ＡＤＭＩＮ@gpuaas.dev" is the same account as
// "admin@gpuaas.dev". Addresses carrying invisible or direction-changing
// code points (zero-width spaces, bidi overrides, any format character) are
// refused outright: they would let someone register a look-alike of another
// account that renders identically in a list.
func NormalizeEmail(raw string) (string, *errdefs.FieldError) {
	for _, r := range raw {
		if unicode.Is(unicode.Cf, r) || r == '\u200b' || r == '\u2060' || r == '\ufeff' {
			return "", &errdefs.FieldError{Field: "/email", Code: "invalid_email",
				Message: "must not contain invisible or text-direction characters; type the address by hand"}
		}
	}
	return strings.ToLower(strings.TrimSpace(norm.NFKC.String(raw))), nil
}
