package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/correlation"
)

// Subject is an authenticated token requester. ID is opaque to this
// package (a publish/pull intent credential, a node agent, ...) and becomes
// the token's "sub".
type Subject struct {
	ID string
	// ExpiresAt, when set, is when the subject's credentials expire: a
	// token issued for the subject expires then at the latest, never
	// after (the default TTL applies when it is later or zero). Note that
	// distribution accepts a token up to a minute (its leeway) past "exp".
	ExpiresAt time.Time
}

// Authorizer is implemented by the control plane.
type Authorizer interface {
	// Authenticate checks HTTP Basic credentials. Wrong credentials must
	// return an error wrapping ErrInvalidCredentials (→ 401); any other
	// error is a server failure (→ 500).
	Authenticate(ctx context.Context, username, password string) (Subject, error)
	// Allowed returns which of the requested actions ("pull", "push",
	// "delete", "*") subject may perform on repository. Deny by returning
	// fewer (or no) actions, not an error; an error is a server failure.
	// The result is intersected with requested again.
	Allowed(ctx context.Context, subject Subject, repository string, requested []string) ([]string, error)
}

// TokenResponse is the body of a successful token request.
type TokenResponse struct {
	Token       string `json:"token"`
	AccessToken string `json:"access_token"`
	ExpiresIn   int64  `json:"expires_in"`
	IssuedAt    string `json:"issued_at"`
}

// TokenClaims are the claims of a registry token (the Docker token spec's
// JWT: registered claims plus "access").
type TokenClaims struct {
	jwt.RegisteredClaims
	Access []Scope `json:"access"`
}

// TokenHandler is the Docker registry token endpoint (GET /v2/token with
// HTTP Basic credentials and "service"/"scope" parameters; POST with the
// OAuth2 password grant for clients such as containerd). It grants the
// intersection of the requested scopes and what the Authorizer allows.
type TokenHandler struct {
	authz   Authorizer
	keys    atomic.Pointer[KeySet] // Registry.SetKeys replaces it
	issuer  string
	service string
	ttl     time.Duration
	now     func() time.Time
	logger  *slog.Logger
}

// NewTokenHandler builds the token endpoint from cfg (Issuer, Service,
// TokenTTL, Now; defaults applied) and keys.
func NewTokenHandler(cfg Config, keys *KeySet, authz Authorizer, logger *slog.Logger) (*TokenHandler, error) {
	cfg = cfg.withDefaults()
	if keys == nil || authz == nil {
		return nil, invalidf("registry_config_invalid", "token handler needs keys and an authorizer")
	}
	if cfg.Service == "" || cfg.TokenTTL <= 0 || cfg.TokenTTL > MaxTokenTTL {
		return nil, invalidf("registry_config_invalid", "token handler needs a service and a ttl in (0, %s]", MaxTokenTTL)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &TokenHandler{
		authz: authz, issuer: cfg.Issuer, service: cfg.Service,
		ttl: cfg.TokenTTL, now: cfg.Now, logger: logger,
	}
	h.keys.Store(keys)
	return h, nil
}

// Issue signs a token for subject with exactly the given access, bypassing
// the Authorizer: the control plane uses it for its own registry client
// and may use it to hand out pull credentials it has already authorized.
// The token expires after the TTL or at subject.ExpiresAt, whichever is
// first; a subject already expired gets an error wrapping
// ErrInvalidCredentials.
func (h *TokenHandler) Issue(subject Subject, access []Scope) (TokenResponse, error) {
	now := h.now().Truncate(time.Second)
	exp := now.Add(h.ttl)
	if !subject.ExpiresAt.IsZero() && subject.ExpiresAt.Before(exp) {
		// NumericDate keeps whole seconds: round down, never past the subject.
		exp = subject.ExpiresAt.Truncate(time.Second)
		if !exp.After(now) {
			return TokenResponse{}, fmt.Errorf("subject %s expired at %s: %w", subject.ID, subject.ExpiresAt.UTC().Format(time.RFC3339), ErrInvalidCredentials)
		}
	}
	if access == nil {
		access = []Scope{} // "access": [] rather than null
	}
	claims := TokenClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    h.issuer,
			Subject:   subject.ID,
			Audience:  jwt.ClaimStrings{h.service},
			ExpiresAt: jwt.NewNumericDate(exp),
			NotBefore: jwt.NewNumericDate(now),
			IssuedAt:  jwt.NewNumericDate(now),
			ID:        uuid.NewString(),
		},
		Access: access,
	}
	key := h.keys.Load().Signing()
	var method jwt.SigningMethod = jwt.SigningMethodEdDSA
	if key.Algorithm() == ES256 {
		method = jwt.SigningMethodES256
	}
	tok := jwt.NewWithClaims(method, claims)
	tok.Header["kid"] = key.KeyID()
	signed, err := tok.SignedString(key.signer)
	if err != nil {
		return TokenResponse{}, fmt.Errorf("sign registry token: %w", err)
	}
	return TokenResponse{
		Token:       signed,
		AccessToken: signed,
		ExpiresIn:   int64(exp.Sub(now) / time.Second),
		IssuedAt:    now.UTC().Format(time.RFC3339),
	}, nil
}

// Limits on credentials in a token request.
const (
	maxCredentialLen = 8 << 10
	maxFormBytes     = 64 << 10
)

func (h *TokenHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var (
		username, password string
		hasCreds           bool
		params             map[string][]string
	)
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		params = r.URL.Query()
		username, password, hasCreds = r.BasicAuth()
	case http.MethodPost:
		// OAuth2 password grant (containerd tries it first when it has a password).
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, "invalid_argument", "malformed form body")
			return
		}
		params = r.PostForm
		if gt := r.PostForm.Get("grant_type"); gt != "password" {
			h.fail(w, r, http.StatusBadRequest, "unsupported_grant_type", "only the password grant is supported")
			return
		}
		username, password = r.PostForm.Get("username"), r.PostForm.Get("password")
		hasCreds = username != "" || password != ""
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		h.fail(w, r, http.StatusMethodNotAllowed, "method_not_allowed", "use GET")
		return
	}
	// offline_token, client_id and access_type are accepted and ignored:
	// no refresh tokens are issued, so clients re-authenticate with Basic.
	if svc := first(params["service"]); svc != "" && svc != h.service {
		h.fail(w, r, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("unknown service %q", svc))
		return
	}
	if !hasCreds {
		h.unauthorized(w, r, "credentials required")
		return
	}
	if len(username) > maxCredentialLen || len(password) > maxCredentialLen {
		h.unauthorized(w, r, "invalid credentials")
		return
	}
	requested, err := ParseScopes(params["scope"])
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "invalid_scope", publicMessage(err))
		return
	}
	ctx := r.Context()
	subject, err := h.authz.Authenticate(ctx, username, password)
	if err != nil {
		if isInvalidCredentials(err) {
			h.logger.DebugContext(ctx, "registry token refused", "reason", "invalid credentials")
			h.unauthorized(w, r, "invalid credentials")
			return
		}
		h.logger.ErrorContext(ctx, "registry token: authenticate", "err", err)
		h.fail(w, r, http.StatusInternalServerError, "internal", "authentication failed")
		return
	}
	granted, err := h.grant(ctx, subject, requested)
	if err != nil {
		h.logger.ErrorContext(ctx, "registry token: authorize", "subject", subject.ID, "err", err)
		h.fail(w, r, http.StatusInternalServerError, "internal", "authorization failed")
		return
	}
	resp, err := h.Issue(subject, granted)
	if isInvalidCredentials(err) {
		h.logger.DebugContext(ctx, "registry token refused", "reason", "credentials expired")
		h.unauthorized(w, r, "invalid credentials")
		return
	}
	if err != nil {
		h.logger.ErrorContext(ctx, "registry token: issue", "err", err)
		h.fail(w, r, http.StatusInternalServerError, "internal", "could not issue token")
		return
	}
	h.logger.DebugContext(ctx, "registry token issued", "subject", subject.ID, "requested", len(requested), "granted", scopeStrings(granted))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	_ = json.NewEncoder(w).Encode(resp)
}

// grant intersects every repository scope with what the Authorizer allows.
// Other resource types (e.g. "registry:catalog:*") are never granted.
func (h *TokenHandler) grant(ctx context.Context, subject Subject, requested []Scope) ([]Scope, error) {
	var granted []Scope
	for _, s := range requested {
		if s.Type != "repository" {
			continue
		}
		allowed, err := h.authz.Allowed(ctx, subject, s.Name, s.Actions)
		if err != nil {
			return nil, err
		}
		if actions := intersectActions(s.Actions, allowed); len(actions) > 0 {
			granted = append(granted, Scope{Type: s.Type, Class: s.Class, Name: s.Name, Actions: actions})
		}
	}
	return granted, nil
}

func (h *TokenHandler) unauthorized(w http.ResponseWriter, r *http.Request, msg string) {
	w.Header().Set("WWW-Authenticate", fmt.Sprintf("Basic realm=%q", h.issuer))
	h.fail(w, r, http.StatusUnauthorized, "unauthenticated", msg)
}

// fail writes the canonical error envelope plus the Docker registry
// "errors" array that registry clients print.
func (h *TokenHandler) fail(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	WriteError(w, r, status, code, msg)
}

// WriteError answers a registry request with an error in both formats: the
// platform's envelope and the distribution API's errors list, which docker
// and crane print. The token endpoint uses it, and so do the per-address
// limiter in front of /v2/token and the schema guard's refusal of pushes.
func WriteError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	correlationID := correlation.ID(r.Context())
	if correlationID == "" {
		correlationID = r.Header.Get("X-Request-ID")
	}
	if correlationID == "" {
		correlationID = correlation.New()
	}
	dockerCode := "UNAUTHORIZED"
	switch status {
	case http.StatusBadRequest:
		dockerCode = "INVALID_REQUEST"
	case http.StatusMethodNotAllowed:
		dockerCode = "UNSUPPORTED"
	case http.StatusTooManyRequests:
		dockerCode = "TOOMANYREQUESTS"
	case http.StatusInternalServerError:
		dockerCode = "UNKNOWN"
	case http.StatusServiceUnavailable:
		dockerCode = "UNAVAILABLE"
	}
	type envelope struct {
		Code          string         `json:"code"`
		Message       string         `json:"message"`
		CorrelationID string         `json:"correlation_id"`
		Details       map[string]any `json:"details"`
	}
	type dockerErr struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error  envelope    `json:"error"`
		Errors []dockerErr `json:"errors"`
	}{
		Error:  envelope{Code: code, Message: msg, CorrelationID: correlationID, Details: map[string]any{}},
		Errors: []dockerErr{{Code: dockerCode, Message: msg}},
	})
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func scopeStrings(scopes []Scope) string {
	s := make([]string, len(scopes))
	for i, sc := range scopes {
		s[i] = sc.String()
	}
	return strings.Join(s, " ")
}
