// Package client is the Go client of the gpuaas REST API. The CLI is built
// on it, and app teams can import it as the Go SDK.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Client calls one gpuaas server as one principal.
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client
	// UserAgent identifies the caller in server logs.
	UserAgent string
	// Retry, when set, sends a request the server refused for now (429,
	// or 503 where that is safe) again after the Retry-After, a bounded
	// number of times. Nil (the default): every refusal is returned.
	Retry *RetryPolicy

	// sleep waits between event-stream reconnects (nil: a timer); tests
	// record the waits instead.
	sleep func(ctx context.Context, d time.Duration) error
}

// New returns a client for baseURL using token (may be empty).
func New(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token,
		HTTP: &http.Client{Timeout: 60 * time.Second, CheckRedirect: sameOriginRedirect}, UserAgent: "gpuaas-go"}
}

// sameOriginRedirect follows a redirect only within the origin the request
// went to. net/http keeps the Authorization header (and re-sends a 307's
// body, a password or an assertion) on a redirect to the same host name
// whatever its scheme or port, so an http:// downgrade or another service
// on the host would get the credentials. The API never redirects to
// another origin, so such a redirect is an error, not a silent 401 there.
func sameOriginRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if from := via[0].URL; !sameOrigin(from, req.URL) {
		return fmt.Errorf("the server at %s redirected to another origin: not following it with your credentials (if that is the API, use its URL as the API URL)",
			from.Scheme+"://"+from.Host)
	}
	return nil
}

// sameOrigin reports whether a and b have the same scheme, host and port
// (an absent port is the scheme's default).
func sameOrigin(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if strings.EqualFold(u.Scheme, "https") {
			return "443"
		}
		return "80"
	}
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// APIError is the canonical error envelope returned by the server.
type APIError struct {
	Status int `json:"-"`
	// RetryAfter is the answer's Retry-After (a 429 or 503): how long the
	// server asks the caller to wait before sending again; 0 if it said
	// nothing.
	RetryAfter    time.Duration  `json:"-"`
	Code          string         `json:"code"`
	Message       string         `json:"message"`
	CorrelationID string         `json:"correlation_id"`
	Details       map[string]any `json:"details"`
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s (HTTP %d, code %s, correlation_id %s)", e.Message, e.Status, e.Code, e.CorrelationID)
}

// errorEnvelope is how every error comes: {"error": {…}}.
type errorEnvelope struct {
	Error APIError `json:"error"`
}

// RequestOption adjusts one request.
type RequestOption func(*http.Request)

// WithIdempotencyKey sets X-Idempotency-Key so a retry cannot act twice.
func WithIdempotencyKey(key string) RequestOption {
	return func(r *http.Request) { r.Header.Set("X-Idempotency-Key", key) }
}

// onceOnly leaves out the idempotency key Do gives every POST and PUT, for
// an operation the server runs without one and that spends what it is
// sent (a join token, an assertion, a wrapping token) or signs in. With a
// key, net/http's transport would count the request as safe to repeat and
// send it again by itself when a reused connection died after it was
// written: the caller would see the repeat's refusal (token already used)
// instead of learning that its first try got no answer. A RetryPolicy does
// not send these again after a 503 either.
func onceOnly(r *http.Request) { r.Header.Del("X-Idempotency-Key") }

// WithIfMatch sets If-Match: the change is made only if the resource is
// still at the version etag names (the ETag of the read it is based on);
// otherwise the API answers 412 and nothing changes.
func WithIfMatch(etag string) RequestOption {
	return func(r *http.Request) { r.Header.Set("If-Match", etag) }
}

// Do sends a JSON request and decodes a JSON response into out (if non-nil).
// POST and PUT get a fresh idempotency key unless one is given, so the
// client's own retries are safe.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, in, out any, opts ...RequestOption) error {
	req, err := c.newRequest(ctx, method, path, query, in, opts)
	if err != nil {
		return err
	}
	return c.send(req, out, 64<<20)
}

// doWithHeader is Do for an operation whose answer carries a header the
// caller needs (an ETag): it returns the answer's headers too.
func (c *Client) doWithHeader(ctx context.Context, method, path string, in, out any, opts ...RequestOption) (http.Header, error) {
	req, err := c.newRequest(ctx, method, path, nil, in, opts)
	if err != nil {
		return nil, err
	}
	resp, err := c.roundTrip(req)
	if err != nil {
		return nil, err
	}
	return resp.Header, decodeResponse(req, resp, out, 64<<20)
}

func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, in any, opts []RequestOption) (*http.Request, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	u := c.BaseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.authorize(req)
	if method == http.MethodPost || method == http.MethodPut {
		req.Header.Set("X-Idempotency-Key", uuid.NewString())
	}
	for _, o := range opts {
		o(req)
	}
	return req, nil
}

// listQuery is a list's query: the parameters that are set, and limit when
// positive.
func listQuery(params map[string]string, limit int) url.Values {
	q := url.Values{}
	for k, v := range params {
		if v != "" {
			q.Set(k, v)
		}
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}

// authorize sets the headers every request carries: Accept, User-Agent, a
// fresh X-Request-ID and the bearer token.
func (c *Client) authorize(req *http.Request) {
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.UserAgent)
	req.Header.Set("X-Request-ID", uuid.NewString())
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
}

// send sends req and decodes a JSON answer of at most limit bytes into out
// (if non-nil), or the error envelope into an *APIError.
func (c *Client) send(req *http.Request, out any, limit int64) error {
	resp, err := c.roundTrip(req)
	if err != nil {
		return err
	}
	return decodeResponse(req, resp, out, limit)
}

// decodeResponse reads a JSON answer (or the error envelope) and closes it.
func decodeResponse(req *http.Request, resp *http.Response, out any, limit int64) error {
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 400 {
		var env errorEnvelope
		if json.Unmarshal(data, &env) != nil || env.Error.Code == "" {
			return &APIError{Status: resp.StatusCode, Code: "http_error", Message: strings.TrimSpace(string(data)),
				RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
		}
		env.Error.Status = resp.StatusCode
		env.Error.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		return &env.Error
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode %s %s response: %w", req.Method, req.URL.Path, err)
		}
	}
	return nil
}

// Token is an access token response.
type Token struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
}

type loginRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

// Login signs in with email and password and keeps the token on c.
//
// Operation: login
func (c *Client) Login(ctx context.Context, email, password string) (Token, error) {
	var t Token
	err := c.Do(ctx, http.MethodPost, "/api/v1/auth/login", nil, loginRequest{Email: email, Password: password}, &t, onceOnly)
	if err == nil {
		c.Token = t.AccessToken
	}
	return t, err
}

// Me is the calling principal and its role bindings.
type Me struct {
	ID        string        `json:"id"`
	Type      string        `json:"type"` // user | service_account | node
	Email     string        `json:"email,omitempty"`
	OrgID     string        `json:"org_id,omitempty"`
	ProjectID string        `json:"project_id,omitempty"`
	Bindings  []RoleBinding `json:"bindings"`
}

// Me returns the calling principal.
//
// Operation: getMe
func (c *Client) Me(ctx context.Context) (Me, error) {
	var m Me
	return m, c.Do(ctx, http.MethodGet, "/api/v1/me", nil, nil, &m)
}

// Health is the liveness answer.
type Health struct {
	Status string `json:"status"` // ok
}

// Healthz says whether the process is up.
//
// Operation: getHealthz
func (c *Client) Healthz(ctx context.Context) (Health, error) {
	var h Health
	return h, c.Do(ctx, http.MethodGet, "/healthz", nil, nil, &h)
}

// Readiness is the readiness answer and its checks.
type Readiness struct {
	Status string            `json:"status"` // ready | not_ready
	Checks map[string]string `json:"checks"`
}

// Readyz reads the server's readiness (database reachable, schema
// current). A server that is not ready answers 503 with its checks: that
// answer is returned as it is, with no error.
//
// Operation: getReadyz
func (c *Client) Readyz(ctx context.Context) (Readiness, error) {
	var r Readiness
	// A 503 here is the answer, not a refusal to wait out: never retried.
	once := *c
	once.Retry = nil
	err := once.Do(ctx, http.MethodGet, "/readyz", nil, nil, &r)
	var api *APIError
	if errors.As(err, &api) && api.Status == http.StatusServiceUnavailable && api.Code == "http_error" {
		if json.Unmarshal([]byte(api.Message), &r) == nil && r.Status != "" {
			return r, nil
		}
	}
	return r, err
}

// JWKS is the JSON Web Key Set that verifies the server's access tokens.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// JWK is one public key of a JWKS.
type JWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use,omitempty"`
	Crv string `json:"crv,omitempty"`
	X   string `json:"x,omitempty"`
}

// JWKS reads the keys that verify the server's access tokens.
//
// Operation: getJWKS
func (c *Client) JWKS(ctx context.Context) (JWKS, error) {
	var k JWKS
	return k, c.Do(ctx, http.MethodGet, "/.well-known/jwks.json", nil, nil, &k)
}

// AsyncAPI reads the event contract (AsyncAPI 3.0, YAML).
//
// Operation: getAsyncAPI
func (c *Client) AsyncAPI(ctx context.Context) ([]byte, error) {
	return c.document(ctx, "/api/asyncapi.yaml", "application/yaml")
}

// maxDocument bounds a document read whole into memory (the event
// contract, a release's manifest, signature or signing key): each is far
// smaller, and a server streaming without end must fail the call rather
// than exhaust the caller's memory.
const maxDocument = 16 << 20

// document reads the body of a GET of at most maxDocument bytes.
func (c *Client) document(ctx context.Context, path, accept string) ([]byte, error) {
	b := cappedBuffer{left: maxDocument}
	_, err := c.download(ctx, path, nil, accept, &b)
	if errors.Is(err, errTooLarge) {
		err = fmt.Errorf("GET %s: %w", path, err)
	}
	return b.buf.Bytes(), err
}

var errTooLarge = fmt.Errorf("the answer is over %d MiB, more than any document of the API: not read further", maxDocument>>20)

// cappedBuffer keeps at most left more bytes, and refuses a write past that.
type cappedBuffer struct {
	buf  bytes.Buffer
	left int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if len(p) > b.left {
		return 0, errTooLarge
	}
	b.left -= len(p)
	return b.buf.Write(p)
}

// download streams the body of a GET that answers something other than
// JSON (a YAML document, CSV, a blob) into w, and returns the response
// headers; an error answer comes back as *APIError.
func (c *Client) download(ctx context.Context, path string, query url.Values, accept string, w io.Writer) (http.Header, error) {
	u := c.BaseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	c.authorize(req)
	req.Header.Set("Accept", accept)
	resp, err := c.roundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		return resp.Header, decodeResponse(req, resp, nil, 1<<20)
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return resp.Header, err
}
