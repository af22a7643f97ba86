package httpapi

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

var requestIDRE = regexp.MustCompile(`^[A-Za-z0-9._:\-]{1,128}$`)

// recorder captures the status and (optionally) body a handler writes.
type recorder struct {
	http.ResponseWriter
	status  int
	capture bool
	body    bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.capture {
		r.body.Write(b)
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

type ctxKey int

const (
	grantsKey ctxKey = iota
	sessionKey
)

// session is the bearer token a request authenticated with and its expiry,
// for an event stream to re-check while it stays open (streamAccess).
type session struct {
	token   string
	expires time.Time
}

func grantsFrom(ctx context.Context) *iam.Grants {
	g, _ := ctx.Value(grantsKey).(*iam.Grants)
	return g
}

// wrap applies, in order: correlation id, recovery, logging and metrics,
// body limit, authentication and idempotency to one route's handler.
func (a *API) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rid := r.Header.Get("X-Request-ID")
		if !requestIDRE.MatchString(rid) {
			rid = correlation.New()
		}
		w.Header().Set("X-Request-ID", rid)
		ctx := correlation.With(r.Context(), rid)
		r = r.WithContext(ctx)
		rec := &recorder{ResponseWriter: w}
		defer func() {
			// http.ErrAbortHandler is no failure of the handler's own: it
			// cuts a response it already began (writeCSV), and net/http
			// must see it to end the response unfinished.
			p := recover()
			if p != nil && p != http.ErrAbortHandler {
				a.Logger.ErrorContext(ctx, "handler panic", "panic", p, "route", rt.pattern)
				if rec.status == 0 {
					writeError(rec, r, a.Logger, errors.New("panic"))
				}
			}
			d := time.Since(start)
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			a.metrics.observe(r.Method, rt.pattern, status, d)
			a.Logger.InfoContext(ctx, "request", "method", r.Method, "route", rt.pattern, "status", status,
				"duration_ms", d.Milliseconds(), "correlation_id", rid, "principal", principal.From(r.Context()).Key())
			if p == http.ErrAbortHandler {
				panic(p)
			}
		}()
		if rt.stream {
			ExtendDeadlines(rec, a.StreamTimeout)
		}
		if rt.eventStream {
			_ = NoWriteDeadline(rec)
		}
		if r.Body != nil && rt.maxBody >= 0 {
			limit := a.MaxBodyBytes
			if rt.maxBody > 0 {
				limit = rt.maxBody
			}
			r.Body = http.MaxBytesReader(rec, r.Body, limit)
		}
		if err := checkEncoding(r); err != nil {
			writeError(rec, r, a.Logger, err)
			return
		}
		if rt.credential && !a.limiter.allow(r) {
			w.Header().Set("Retry-After", "1")
			writeError(rec, r, a.Logger, errRateLimited)
			return
		}
		actx, err := a.authenticate(r, rt)
		if err != nil {
			writeError(rec, r, a.Logger, err)
			return
		}
		r = r.WithContext(actx)
		// After authentication: a caller who may not act learns nothing
		// about the replica's schema from a refusal.
		if a.Writable != nil && (changes(r) || rt.writes) {
			if err := a.Writable(); err != nil {
				writeError(rec, r, a.Logger, err)
				return
			}
		}
		if !rt.public && (r.Method == http.MethodPost || r.Method == http.MethodPut) && !rt.noIdempotency {
			if key := idempotencyKey(r); key != "" {
				a.idempotent(rec, r, rt, key)
				return
			}
		}
		a.serve(rec, r, rt)
	})
}

func (a *API) serve(w http.ResponseWriter, r *http.Request, rt route) {
	if err := rt.handler(w, r); err != nil {
		writeError(w, r, a.Logger, err)
	}
}

// authenticate resolves the bearer token (if any) into a principal and its
// grants. Public routes accept anonymous callers.
func (a *API) authenticate(r *http.Request, rt route) (context.Context, error) {
	ctx := r.Context()
	h := r.Header.Get("Authorization")
	if rt.public {
		return ctx, nil
	}
	if h == "" && rt.websocket {
		if tok := events.BearerFromProtocols(r.Header.Values("Sec-WebSocket-Protocol")); tok != "" {
			h = "Bearer " + tok
		}
	}
	if h == "" {
		return nil, errdefs.Unauthenticated("unauthenticated", "send an access token as 'Authorization: Bearer <token>' (get one from POST /api/v1/auth/login or /api/v1/auth/service-account/token)")
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return nil, errdefs.Unauthenticated("unauthenticated", "the Authorization header must be 'Bearer <token>'")
	}
	p, claims, err := a.Tokens.Claims(ctx, tok)
	if err != nil {
		return nil, err
	}
	s := session{token: tok}
	if claims.ExpiresAt != nil {
		s.expires = claims.ExpiresAt.Time
	}
	ctx = iam.WithClaims(context.WithValue(principal.With(ctx, p), sessionKey, s), claims)
	g, err := iam.LoadGrants(ctx, a.Store.Read(), p)
	if err != nil {
		return nil, err
	}
	return context.WithValue(ctx, grantsKey, g), nil
}

func idempotencyKey(r *http.Request) string {
	if k := r.Header.Get("X-Idempotency-Key"); k != "" {
		return k
	}
	return r.Header.Get("Idempotency-Key")
}

// faultExitAfterServe makes the process exit right after a keyed request's
// handler returned and before its answer is recorded: the crash window the
// in-transaction commit record closes. Set only by tests that kill and
// restart a real server (GPUAAS_FAULT_EXIT_AFTER_SERVE=1).
var faultExitAfterServe = os.Getenv("GPUAAS_FAULT_EXIT_AFTER_SERVE") == "1"

// idempotent runs a keyed mutation at most once per principal and key: a
// retry with the same request, by a caller whose roles are unchanged, gets
// the stored response; the same key with a different request is refused; a
// retry while the first still runs gets 409.
func (a *API) idempotent(w *recorder, r *http.Request, rt route, key string) {
	ctx := r.Context()
	if len(key) > 255 {
		writeError(w, r, a.Logger, errdefs.Invalid("invalid_idempotency_key", "the idempotency key must be at most 255 characters"))
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, r, a.Logger, decodeError(err))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	hash := a.RequestHash(r.Method, r.URL.Path, body)
	claim := storage.IdempotencyClaim{Principal: principal.From(ctx).Key(), Key: key, ClaimID: uuid.NewString()}
	grants := grantsFrom(ctx).Fingerprint()
	now := a.Now()
	q := a.Store.Read()
	err = q.ClaimIdempotencyKey(ctx, storage.IdempotencyRecord{Principal: claim.Principal, Key: key, Method: r.Method, Path: r.URL.Path,
		RequestHash: hash, GrantsHash: grants, CreatedAt: now, ExpiresAt: now.Add(a.IdempotencyTTL), ClaimID: claim.ClaimID})
	if errors.Is(err, storage.ErrAlreadyExists) {
		prev, gerr := q.GetIdempotencyRecord(ctx, claim.Principal, key)
		switch {
		case gerr != nil:
			writeError(w, r, a.Logger, gerr)
		case prev.RequestHash != hash:
			writeError(w, r, a.Logger, errdefs.Unprocessable("idempotency_key_reused",
				"this idempotency key was already used for a different request; use a new key for a new request"))
		case prev.GrantsHash != grants && (prev.State == storage.IdempotencyComplete || !prev.CommittedAt.IsZero()):
			// The stored outcome was made under other rights: a member
			// removed since must not be handed it (it may name what they
			// can no longer read), and a refusal stored before a role was
			// given must not outlive the grant. Nothing runs again either:
			// the first request may have taken effect.
			writeError(w, r, a.Logger, errdefs.Conflict("idempotency_key_grants_changed",
				"your roles changed since the request with this idempotency key was first sent, so its outcome is not shown again; read the resource to see where it stands, or send the request with a new key"))
		case prev.State != storage.IdempotencyComplete && !prev.CommittedAt.IsZero():
			// The change committed but its answer was lost (the server
			// stopped, or failed after the commit): it is never run again.
			writeError(w, r, a.Logger, errdefs.Conflict("idempotency_key_committed",
				"the request with this idempotency key already took effect, but its answer was lost; read %s %s instead of retrying",
				prev.ResourceType, prev.ResourceID).WithDetails(map[string]any{"resource_type": prev.ResourceType,
				"resource_id": prev.ResourceID, "committed_at": prev.CommittedAt}))
		case prev.State != storage.IdempotencyComplete:
			w.Header().Set("Retry-After", "1")
			writeError(w, r, a.Logger, errdefs.Conflict("idempotency_key_in_flight",
				"a request with this idempotency key is still being processed; retry shortly (a claim whose change never committed is given up after %s)",
				storage.AbandonedAfter))
		default:
			w.Header().Set("Idempotent-Replayed", "true")
			if prev.ContentType != "" {
				w.Header().Set("Content-Type", prev.ContentType)
			}
			for _, name := range replayedHeaders {
				if v, ok := prev.Headers[name]; ok {
					w.Header().Set(name, v)
				}
			}
			w.WriteHeader(prev.StatusCode)
			_, _ = w.Write(prev.Body)
		}
		return
	}
	if err != nil {
		writeError(w, r, a.Logger, err)
		return
	}
	w.capture = true
	defer func() {
		// A handler that panicked is a server error too: give the claim
		// back (unless its change committed) so the retry runs, instead
		// of answering "still being processed" until it is abandoned.
		if p := recover(); p != nil {
			_ = q.ReleaseIdempotencyKey(context.WithoutCancel(ctx), claim)
			panic(p)
		}
	}()
	a.serve(w, r.WithContext(storage.WithIdempotencyClaim(ctx, claim)), rt)
	if faultExitAfterServe && w.status < 500 {
		os.Exit(137) // test-only fault injection: a crash between commit and recording the answer
	}
	// On a server error or a rate limit's 429 the claim is released,
	// unless its change committed, so a retry runs for real: both say
	// "not now", and a 429 kept as the answer would refuse every retry
	// with the same key until the key expires, long after Retry-After.
	// Any other outcome, success or client error, is what every retry
	// will see. A background context: the client may have gone, the
	// record must not.
	bg := context.WithoutCancel(ctx)
	if w.status >= 500 || w.status == 0 || w.status == http.StatusTooManyRequests {
		_ = q.ReleaseIdempotencyKey(bg, claim)
		return
	}
	if err := q.CompleteIdempotencyKey(bg, claim, w.status, w.body.Bytes(), w.Header().Get("Content-Type"), keptHeaders(w.Header())); err != nil {
		a.Logger.ErrorContext(ctx, "could not store idempotent response", "err", err)
	}
}

// replayedHeaders are the response headers, besides Content-Type, that a
// replay repeats: those a client acts on. Location names the operation a
// lifecycle request started (a retried launch polls it), ETag the version a
// write left (the next If-Match is built from it). An allow-list, so that
// nothing credential-like a handler sets (Set-Cookie) is ever stored, and
// nothing that was true only at the time (Retry-After, Date) is repeated.
var replayedHeaders = []string{"Location", "ETag"}

// keptHeaders picks the replayed headers out of h; nil when it has none.
func keptHeaders(h http.Header) map[string]string {
	var kept map[string]string
	for _, name := range replayedHeaders {
		if v := h.Get(name); v != "" {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[name] = v
		}
	}
	return kept
}

func sortFieldErrors(fe []errdefs.FieldError) {
	sort.Slice(fe, func(i, j int) bool { return fe[i].Field < fe[j].Field })
}

// RequestHash identifies a request for idempotency: same method, path and
// body bytes, same hash. It is keyed (IdempotencyHashKey): a body may hold
// a password (a new account's, a changed one), and a plain SHA-256 of it,
// kept in the database for a day, would let whoever reads the database try
// passwords against it offline at a hash's speed.
func (a *API) RequestHash(method, path string, body []byte) string {
	mac := hmac.New(sha256.New, a.IdempotencyHashKey)
	mac.Write([]byte(method + " " + path + "\n"))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// writeSecretJSON writes a response carrying a secret that is shown once (a
// private key, a wrapping token). The idempotency layer keeps keyed
// responses to replay them; it stores redacted instead, so the secret rests
// nowhere and a replay says it was withheld rather than repeating it.
func writeSecretJSON(w http.ResponseWriter, status int, full, redacted any) {
	w.Header().Set("Cache-Control", "no-store")
	rec, ok := w.(*recorder)
	if !ok || !rec.capture {
		writeJSON(w, status, full)
		return
	}
	rec.capture = false
	writeJSON(w, status, full)
	b, err := json.Marshal(redacted)
	if err != nil {
		return
	}
	rec.body.Write(append(b, '\n'))
}
