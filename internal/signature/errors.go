package signature

import (
	"errors"
	"fmt"
)

// Reason is the machine-readable cause of a failed verification. Its values
// are stable: they are stored as trust-state failure reasons and shown to users.
type Reason string

const (
	// ReasonSignatureMissing: no signature manifest (tag sha256-<hex>.sig), or it holds no simple signing layer.
	ReasonSignatureMissing Reason = "signature_missing"
	// ReasonSignatureInvalid: no registered key verifies any signature (other key, tampered payload, bad encoding).
	ReasonSignatureInvalid Reason = "signature_invalid"
	// ReasonDigestMismatch: a validly signed payload names another manifest digest.
	ReasonDigestMismatch Reason = "digest_mismatch"
	// ReasonIdentityMismatch: a validly signed payload for this digest names another repository.
	ReasonIdentityMismatch Reason = "identity_mismatch"
	// ReasonProvenanceMissing: no attestation manifest (tag sha256-<hex>.att), or no SLSA provenance in it.
	ReasonProvenanceMissing Reason = "provenance_missing"
	// ReasonProvenanceInvalid: provenance that no registered key verifies, or that is malformed.
	ReasonProvenanceInvalid Reason = "provenance_invalid"
	// ReasonProvenanceSubjectMismatch: validly signed provenance about another digest.
	ReasonProvenanceSubjectMismatch Reason = "provenance_subject_mismatch"
)

// Error is a verification failure. Registry and transport failures are not
// Errors: they are returned wrapped as is, because "could not look" is not
// "not signed".
type Error struct {
	Reason Reason
	Ref    string // the artifact, repo@sha256:...
	Detail string // human-readable explanation
}

func (e *Error) Error() string {
	switch {
	case e.Ref == "" && e.Detail == "":
		return string(e.Reason)
	case e.Detail == "":
		return fmt.Sprintf("%s: %s", e.Reason, e.Ref)
	default:
		return fmt.Sprintf("%s: %s: %s", e.Reason, e.Ref, e.Detail)
	}
}

// Is matches another *Error with the same Reason, so the sentinels below work with errors.Is.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Reason == e.Reason
}

// Sentinels for errors.Is(err, signature.ErrSignatureInvalid) and friends.
var (
	ErrSignatureMissing          = &Error{Reason: ReasonSignatureMissing}
	ErrSignatureInvalid          = &Error{Reason: ReasonSignatureInvalid}
	ErrDigestMismatch            = &Error{Reason: ReasonDigestMismatch}
	ErrIdentityMismatch          = &Error{Reason: ReasonIdentityMismatch}
	ErrProvenanceMissing         = &Error{Reason: ReasonProvenanceMissing}
	ErrProvenanceInvalid         = &Error{Reason: ReasonProvenanceInvalid}
	ErrProvenanceSubjectMismatch = &Error{Reason: ReasonProvenanceSubjectMismatch}
)

// ReasonOf returns the Reason of a verification failure, or "" when err is nil
// or not a verification failure (e.g. the registry could not be reached).
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func failure(reason Reason, ref RepoDigest, format string, args ...any) *Error {
	return &Error{Reason: reason, Ref: ref.String(), Detail: fmt.Sprintf(format, args...)}
}
