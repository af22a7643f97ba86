package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// statusOf is the one table from error kinds to HTTP status codes.
var statusOf = map[errdefs.Kind]int{
	errdefs.KindInvalidArgument:    http.StatusBadRequest,
	errdefs.KindUnauthenticated:    http.StatusUnauthorized,
	errdefs.KindPermissionDenied:   http.StatusForbidden,
	errdefs.KindNotFound:           http.StatusNotFound,
	errdefs.KindAlreadyExists:      http.StatusConflict,
	errdefs.KindConflict:           http.StatusConflict,
	errdefs.KindFailedPrecondition: http.StatusConflict,
	errdefs.KindUnprocessable:      http.StatusUnprocessableEntity,
	errdefs.KindTooLarge:           http.StatusRequestEntityTooLarge,
	errdefs.KindRateLimited:        http.StatusTooManyRequests,
	errdefs.KindUnavailable:        http.StatusServiceUnavailable,
	errdefs.KindInternal:           http.StatusInternalServerError,
	errdefs.KindGone:               http.StatusGone,
	errdefs.KindPreconditionFailed: http.StatusPreconditionFailed,
}

// unavailableRetrySeconds is the Retry-After of a 503 while the database is
// away: a PostgreSQL restart or failover takes seconds.
const unavailableRetrySeconds = 2

// envelope is the canonical error body of every gpuaas error response.
type envelope struct {
	Error envelopeBody `json:"error"`
}

type envelopeBody struct {
	Code          string         `json:"code"`
	Message       string         `json:"message"`
	CorrelationID string         `json:"correlation_id"`
	Details       map[string]any `json:"details"`
}

// writeError renders err as the canonical envelope. Errors that are not
// client-safe become a generic 500 and are logged with their cause.
func writeError(w http.ResponseWriter, r *http.Request, logger *slog.Logger, err error) {
	ctx := r.Context()
	e, ok := errdefs.As(err)
	if !ok {
		kind := errdefs.KindOf(err)
		switch kind {
		case errdefs.KindNotFound:
			e = errdefs.NotFound("not_found", "the resource does not exist")
		case errdefs.KindAlreadyExists, errdefs.KindConflict:
			e = errdefs.Conflict("conflict", "the request conflicts with the current state; reload and retry")
		case errdefs.KindUnavailable:
			// The database is away (restart, failover, no connections):
			// nothing is wrong with the request. A mutation either
			// committed or did not; retry it with the same idempotency key.
			e = &errdefs.Error{Kind: errdefs.KindUnavailable, Code: "unavailable",
				Message: "the database is unavailable for a moment; retry the request (with the same X-Idempotency-Key for a change)",
				Details: map[string]any{errdefs.RetryAfterDetail: unavailableRetrySeconds}}
		default:
			e = &errdefs.Error{Kind: errdefs.KindInternal, Code: "internal_error",
				Message: "the server failed to handle the request; retry, and report the correlation_id if it persists"}
		}
		if cerr := ctx.Err(); errors.Is(cerr, context.Canceled) && errors.Is(err, cerr) {
			// The client hung up and the work stopped with it: nothing
			// failed on this side, and nobody reads the answer. (A
			// deadline the server set is its own failure, and stays one.)
			logger.InfoContext(ctx, "request ended: the client went away", "err", err, "correlation_id", correlation.ID(ctx))
		} else {
			logger.ErrorContext(ctx, "request failed", "err", err, "correlation_id", correlation.ID(ctx))
		}
	} else if e.Kind == errdefs.KindInternal {
		logger.ErrorContext(ctx, "request failed", "err", err, "correlation_id", correlation.ID(ctx))
	}
	status := statusOf[e.Kind]
	if e.Code == "method_not_allowed" {
		status = http.StatusMethodNotAllowed
	}
	if status == 0 {
		status = http.StatusInternalServerError
	}
	details := e.Details
	if details == nil {
		details = map[string]any{}
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpuaas"`)
	}
	if secs, ok := details[errdefs.RetryAfterDetail].(int); ok && (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) {
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	writeJSON(w, status, envelope{Error: envelopeBody{Code: e.Code, Message: e.Message, CorrelationID: correlation.ID(ctx), Details: details}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}
