package registry

import (
	"errors"
	"fmt"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// Sentinels for errors.Is. Errors returned by this package are
// *errdefs.Error values (kinds InvalidArgument, NotFound, Unavailable) that
// also match these, and NotFound ones match errdefs.ErrNotFound.
var (
	// ErrNotFound: the manifest (or repository) does not exist in the registry.
	ErrNotFound = errors.New("registry: not found")
	// ErrInvalidArgument: a repository name, digest, scope, key or config value is malformed.
	ErrInvalidArgument = errors.New("registry: invalid argument")
	// ErrInvalidCredentials is what an Authorizer returns (wrapped or not)
	// from Authenticate when the username or password is wrong. Any other
	// error is treated as a server failure, not as a 401. An errdefs error
	// of kind Unauthenticated counts as invalid credentials too.
	ErrInvalidCredentials = errors.New("registry: invalid credentials")
	// ErrUnavailable: the registry could not be reached or answered unexpectedly.
	ErrUnavailable = errors.New("registry: unavailable")
)

func invalidf(code, format string, args ...any) error {
	return errdefs.Invalid(code, format, args...).WithCause(ErrInvalidArgument)
}

func notFoundf(code, format string, args ...any) error {
	return errdefs.NotFound(code, format, args...).WithCause(ErrNotFound)
}

func unavailablef(code, format string, args ...any) error {
	return &errdefs.Error{Kind: errdefs.KindUnavailable, Code: code, Message: fmt.Sprintf(format, args...), Cause: ErrUnavailable}
}

// isInvalidCredentials reports whether an Authenticate error means "wrong
// credentials" rather than a failure.
func isInvalidCredentials(err error) bool {
	if errors.Is(err, ErrInvalidCredentials) {
		return true
	}
	e, ok := errdefs.As(err)
	return ok && e.Kind == errdefs.KindUnauthenticated
}

// publicMessage is the client-safe message of err.
func publicMessage(err error) string {
	if e, ok := errdefs.As(err); ok {
		return e.Message
	}
	return err.Error()
}
