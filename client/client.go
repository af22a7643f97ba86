// Package client is the Go client of the gpuaas REST API. The CLI is built
// on it, and app teams can import it as the Go SDK.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
}

// New returns a client for baseURL using token (may be empty).
func New(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{Timeout: 60 * time.Second}, UserAgent: "gpuaas-go"}
}

// APIError is the canonical error envelope returned by the server.
type APIError struct {
	Status        int            `json:"-"`
	Code          string         `json:"code"`
	Message       string         `json:"message"`
	CorrelationID string         `json:"correlation_id"`
	Details       map[string]any `json:"details"`
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s (HTTP %d, code %s, correlation_id %s)", e.Message, e.Status, e.Code, e.CorrelationID)
}

// RequestOption adjusts one request.
type RequestOption func(*http.Request)

// WithIdempotencyKey sets X-Idempotency-Key so a retry cannot act twice.
func WithIdempotencyKey(key string) RequestOption {
	return func(r *http.Request) { r.Header.Set("X-Idempotency-Key", key) }
}

// Do sends a JSON request and decodes a JSON response into out (if non-nil).
// POST and PUT get a fresh idempotency key unless one is given, so the
// client's own retries are safe.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, in, out any, opts ...RequestOption) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	u := c.BaseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
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
	return c.send(req, out, 64<<20)
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
	resp, err := c.HTTP.Do(req)
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
		var env struct {
			Error APIError `json:"error"`
		}
		if json.Unmarshal(data, &env) != nil || env.Error.Code == "" {
			return &APIError{Status: resp.StatusCode, Code: "http_error", Message: strings.TrimSpace(string(data))}
		}
		env.Error.Status = resp.StatusCode
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

// Login signs in with email and password and keeps the token on c.
func (c *Client) Login(ctx context.Context, email, password string) (Token, error) {
	var t Token
	err := c.Do(ctx, http.MethodPost, "/api/v1/auth/login", nil, map[string]string{"email": email, "password": password}, &t)
	if err == nil {
		c.Token = t.AccessToken
	}
	return t, err
}

// Me is the calling principal.
type Me struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Email     string `json:"email,omitempty"`
	ProjectID string `json:"project_id,omitempty"`
}

// Me returns the calling principal.
func (c *Client) Me(ctx context.Context) (Me, error) {
	var m Me
	return m, c.Do(ctx, http.MethodGet, "/api/v1/me", nil, nil, &m)
}
