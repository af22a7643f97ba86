package events

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/coder/websocket"
	"github.com/gpuaas/gpuaas/internal/correlation"
)

// Why a stream ended because its reader lost access (Revoked.Reason; the
// error code of the stream's last message).
const (
	ReasonTokenExpired    = "token_expired"    // the access token reached its expiry
	ReasonTokenRevoked    = "token_revoked"    // the token was revoked (sign-out everywhere, key revoked, account re-enabled after a disable)
	ReasonAccountDisabled = "account_disabled" // the user or service account was disabled
	ReasonAccountDeleted  = "account_deleted"  // the user or service account no longer exists
	ReasonAccessRevoked   = "access_revoked"   // the reader no longer holds events.read on the stream's scope
)

// WebSocket close codes of a stream that ended because its reader lost
// access; the close reason is the Reason.
const (
	// CloseUnauthenticated: the token no longer authenticates (expired,
	// revoked, account disabled or deleted); sign in again.
	CloseUnauthenticated websocket.StatusCode = 4401
	// CloseAccessRevoked: the reader lost events.read on the scope.
	CloseAccessRevoked websocket.StatusCode = 4403
)

// Access is what an open stream keeps checking about its reader: the
// stream ends at Expires (the token's expiry; zero: none), and whenever
// Recheck — the open-time authentication and permission check, run again —
// says access is gone. Recheck runs every Reader.Reauthorize, at once when
// the hub reports an access change (Hub.AccessChanged), and after an iam.*
// event passed through the stream. It returns a *Revoked to end the
// stream; any other error is taken as transient and retried at the next
// check.
type Access struct {
	Expires time.Time
	Recheck func(ctx context.Context) error
}

// Revoked ends a stream whose reader lost access: SSE sends one
// `event: error` whose data is {"error": {"code": Reason, …}} and closes;
// a WebSocket sends the same message and closes with CloseUnauthenticated
// or CloseAccessRevoked.
type Revoked struct {
	Reason  string
	Message string
}

func (r *Revoked) Error() string { return "event stream: " + r.Reason + ": " + r.Message }

func (r *Revoked) closeCode() websocket.StatusCode {
	if r.Reason == ReasonAccessRevoked {
		return CloseAccessRevoked
	}
	return CloseUnauthenticated
}

// body is the stream's last message, in the REST error envelope's shape.
func (r *Revoked) body(ctx context.Context) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"code": r.Reason, "message": r.Message, "correlation_id": correlation.ID(ctx), "details": map[string]any{},
	}})
	return b
}

// TokenExpired is the Revoked of a stream whose token reached its expiry.
func TokenExpired() *Revoked {
	return &Revoked{Reason: ReasonTokenExpired, Message: "the access token expired; get a new one and resume with the last event id"}
}

// recheck runs acc.Recheck and returns a *Revoked, or nil (access holds, or
// the check failed for a reason that says nothing about access).
func (acc Access) recheck(ctx context.Context) *Revoked {
	if acc.Recheck == nil {
		return nil
	}
	var r *Revoked
	if err := acc.Recheck(ctx); errors.As(err, &r) {
		return r
	}
	return nil
}

// expired reports whether the token is past its expiry at now.
func (acc Access) expired(now time.Time) bool {
	return !acc.Expires.IsZero() && !now.Before(acc.Expires)
}
