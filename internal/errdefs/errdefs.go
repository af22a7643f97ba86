// Package errdefs defines the kinds of failure every layer of gpuaas speaks.
//
// Domains return an *Error carrying a Kind, a stable machine code and a message
// that is safe to show a client; the transport maps the Kind to a status code
// in one table. The wrapped cause stays server-side (logs), never in a response.
package errdefs

import (
	"errors"
	"fmt"
	"maps"
	"strings"
)

// Kind classifies an error for transport mapping.
type Kind int

const (
	KindInternal Kind = iota
	KindInvalidArgument
	KindUnauthenticated
	KindPermissionDenied
	KindNotFound
	KindAlreadyExists
	KindConflict
	KindFailedPrecondition
	KindUnprocessable
	KindTooLarge
	KindRateLimited
	KindUnavailable
	KindGone // a resource (or resume point) that existed and has expired
	// KindPreconditionFailed: the request's own precondition (If-Match)
	// no longer holds: what it was based on changed since it was read.
	// Unlike KindFailedPrecondition (the server's state refuses the
	// change, 409), the client asked for the check, so it gets 412.
	KindPreconditionFailed
)

// Sentinels for errors.Is checks, usable across layers (the store returns them).
var (
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
	ErrConflict      = errors.New("conflict")
	// ErrUnavailable: the database (or another dependency) could not be
	// reached or went away mid-request; the request may be retried.
	ErrUnavailable = errors.New("unavailable")
)

// Error is a classified, client-safe error.
type Error struct {
	Kind    Kind
	Code    string         // stable machine code, e.g. "project_not_found"
	Message string         // safe to show a person; says what to do
	Details map[string]any // optional structured detail (field errors, ...)
	Cause   error          // internal cause; never serialised
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Cause)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Cause }

// Is lets errors.Is(err, ErrNotFound) match a NotFound-kind *Error too.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Kind == KindNotFound
	case ErrAlreadyExists:
		return e.Kind == KindAlreadyExists
	case ErrConflict:
		return e.Kind == KindConflict
	}
	return false
}

func newf(k Kind, code, format string, args ...any) *Error {
	return &Error{Kind: k, Code: code, Message: fmt.Sprintf(format, args...)}
}

func Invalid(code, format string, args ...any) *Error {
	return newf(KindInvalidArgument, code, format, args...)
}
func NotFound(code, format string, args ...any) *Error {
	return newf(KindNotFound, code, format, args...)
}
func AlreadyExists(code, format string, args ...any) *Error {
	return newf(KindAlreadyExists, code, format, args...)
}
func Conflict(code, format string, args ...any) *Error {
	return newf(KindConflict, code, format, args...)
}
func FailedPrecondition(code, format string, args ...any) *Error {
	return newf(KindFailedPrecondition, code, format, args...)
}
func Unprocessable(code, format string, args ...any) *Error {
	return newf(KindUnprocessable, code, format, args...)
}
func Gone(code, format string, args ...any) *Error {
	return newf(KindGone, code, format, args...)
}
func PreconditionFailed(code, format string, args ...any) *Error {
	return newf(KindPreconditionFailed, code, format, args...)
}
func Unauthenticated(code, format string, args ...any) *Error {
	return newf(KindUnauthenticated, code, format, args...)
}
func PermissionDenied(code, format string, args ...any) *Error {
	return newf(KindPermissionDenied, code, format, args...)
}

// RetryAfterDetail is the detail that says, in whole seconds, when to try
// again; the transport sends it as Retry-After with a 429 or 503.
const RetryAfterDetail = "retry_after_seconds"

// RateLimited is a refusal to be retried in retryAfter seconds; details,
// if any, are added beside RetryAfterDetail, which they cannot replace.
func RateLimited(code string, retryAfter int, details map[string]any, format string, args ...any) *Error {
	d := map[string]any{}
	maps.Copy(d, details)
	d[RetryAfterDetail] = retryAfter
	return newf(KindRateLimited, code, format, args...).WithDetails(d)
}

// WithDetails returns e with details attached.
func (e *Error) WithDetails(d map[string]any) *Error { e.Details = d; return e }

// WithCause returns e with an internal cause attached.
func (e *Error) WithCause(err error) *Error { e.Cause = err; return e }

// FieldError describes one invalid input field, addressed by JSON pointer.
type FieldError struct {
	Field   string `json:"field"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Validation builds an InvalidArgument error listing field errors.
func Validation(fields []FieldError) *Error {
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		parts = append(parts, f.Field+" "+f.Message)
	}
	msg := "invalid request: " + strings.Join(parts, "; ")
	return &Error{Kind: KindInvalidArgument, Code: "validation_failed", Message: msg,
		Details: map[string]any{"fields": fields}}
}

// As extracts an *Error from err, if any.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// KindOf reports the Kind of err, treating store sentinels as their kinds.
func KindOf(err error) Kind {
	if e, ok := As(err); ok {
		return e.Kind
	}
	switch {
	case errors.Is(err, ErrNotFound):
		return KindNotFound
	case errors.Is(err, ErrAlreadyExists):
		return KindAlreadyExists
	case errors.Is(err, ErrConflict):
		return KindConflict
	case errors.Is(err, ErrUnavailable):
		return KindUnavailable
	}
	return KindInternal
}
