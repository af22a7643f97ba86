package client

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// ServiceAccountTokenPath is the token endpoint, relative to the base URL.
const ServiceAccountTokenPath = "/api/v1/auth/service-account/token"

// GrantTypeJWTBearer is the RFC 7523 grant type of the token exchange.
const GrantTypeJWTBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// ServiceAccountKey is the public view of one key.
type ServiceAccountKey struct {
	KeyID        string  `json:"key_id"`
	Algorithm    string  `json:"algorithm"`
	PublicKeyPEM string  `json:"public_key_pem"`
	Status       string  `json:"status"`
	CreatedAt    string  `json:"created_at"`
	ExpiresAt    *string `json:"expires_at"`
}

// ServiceAccount is a project's machine identity.
type ServiceAccount struct {
	ID          string              `json:"id"`
	OrgID       string              `json:"org_id"`
	ProjectID   string              `json:"project_id"`
	Slug        string              `json:"slug"`
	Name        string              `json:"name"`
	Description string              `json:"description"`
	Status      string              `json:"status"`
	Roles       []string            `json:"roles"`
	Keys        []ServiceAccountKey `json:"keys"`
	CreatedAt   string              `json:"created_at"`
	UpdatedAt   string              `json:"updated_at"`
}

// IssuedServiceAccountKey answers create and rotate-key. PrivateKeyPEM is
// present once, when the server generated the key.
type IssuedServiceAccountKey struct {
	ServiceAccount
	KeyID         string `json:"key_id"`
	PrivateKeyPEM string `json:"private_key_pem,omitempty"`
	TokenURL      string `json:"token_url"`
}

// KeyFile is what to keep of an issued key: everything `SignAssertion`
// needs. Store it like a password (mode 0600, a secret store).
func (k IssuedServiceAccountKey) KeyFile() KeyFile {
	alg := ""
	for _, key := range k.Keys {
		if key.KeyID == k.KeyID {
			alg = key.Algorithm
		}
	}
	return KeyFile{Type: KeyFileType, ServiceAccountID: k.ID, ProjectID: k.ProjectID, KeyID: k.KeyID,
		Algorithm: alg, PrivateKeyPEM: k.PrivateKeyPEM, TokenURL: k.TokenURL}
}

// CreateServiceAccountRequest creates an account and its first key.
type CreateServiceAccountRequest struct {
	Name         string   `json:"name"`
	Slug         string   `json:"slug"`
	Description  string   `json:"description,omitempty"`
	Roles        []string `json:"roles,omitempty"`
	KeyAlgorithm string   `json:"key_algorithm,omitempty"`
	PublicKeyPEM string   `json:"public_key_pem,omitempty"`
}

// RotateServiceAccountKeyRequest adds a key; the others expire after the grace period.
type RotateServiceAccountKeyRequest struct {
	GracePeriodSeconds int    `json:"grace_period_seconds"`
	KeyAlgorithm       string `json:"key_algorithm,omitempty"`
	PublicKeyPEM       string `json:"public_key_pem,omitempty"`
}

// ServiceAccountList is one page of accounts.
type ServiceAccountList struct {
	Items      []ServiceAccount `json:"items"`
	NextCursor string           `json:"next_cursor"`
}

func saPath(projectID string, rest ...string) string {
	p := "/api/v1/projects/" + url.PathEscape(projectID) + "/service-accounts"
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// CreateServiceAccount creates a service account; the answer holds the
// private key of its first key, once.
//
// Operation: createServiceAccount
func (c *Client) CreateServiceAccount(ctx context.Context, projectID string, in CreateServiceAccountRequest, opts ...RequestOption) (IssuedServiceAccountKey, error) {
	var out IssuedServiceAccountKey
	return out, c.Do(ctx, http.MethodPost, saPath(projectID), nil, in, &out, opts...)
}

// ListServiceAccounts lists one page of a project's service accounts.
//
// Operation: listServiceAccounts
func (c *Client) ListServiceAccounts(ctx context.Context, projectID string, limit int, cursor string) (ServiceAccountList, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out ServiceAccountList
	return out, c.Do(ctx, http.MethodGet, saPath(projectID), q, nil, &out)
}

// GetServiceAccount reads one service account.
//
// Operation: getServiceAccount
func (c *Client) GetServiceAccount(ctx context.Context, projectID, id string) (ServiceAccount, error) {
	var out ServiceAccount
	return out, c.Do(ctx, http.MethodGet, saPath(projectID, id), nil, nil, &out)
}

// DisableServiceAccount disables an account; its tokens stop working.
//
// Operation: disableServiceAccount
func (c *Client) DisableServiceAccount(ctx context.Context, projectID, id string) (ServiceAccount, error) {
	var out ServiceAccount
	return out, c.Do(ctx, http.MethodPost, saPath(projectID, id, "disable"), nil, nil, &out)
}

// EnableServiceAccount enables a disabled account.
//
// Operation: enableServiceAccount
func (c *Client) EnableServiceAccount(ctx context.Context, projectID, id string) (ServiceAccount, error) {
	var out ServiceAccount
	return out, c.Do(ctx, http.MethodPost, saPath(projectID, id, "enable"), nil, nil, &out)
}

// RotateServiceAccountKey adds a key and returns its private key, once.
//
// Operation: rotateServiceAccountKey
func (c *Client) RotateServiceAccountKey(ctx context.Context, projectID, id string, in RotateServiceAccountKeyRequest) (IssuedServiceAccountKey, error) {
	var out IssuedServiceAccountKey
	return out, c.Do(ctx, http.MethodPost, saPath(projectID, id, "rotate-key"), nil, in, &out)
}

// DeleteServiceAccount deletes an account, its keys and its role bindings.
//
// Operation: deleteServiceAccount
func (c *Client) DeleteServiceAccount(ctx context.Context, projectID, id string) error {
	return c.Do(ctx, http.MethodDelete, saPath(projectID, id), nil, nil, nil)
}

// KeyFileType marks a service-account key file.
const KeyFileType = "gpuaas_service_account_key"

// KeyFile is a service-account key as kept by its holder: the ids, the
// private key and the audience to sign for. `gpuaas sa create --key-file`
// writes one (mode 0600).
type KeyFile struct {
	Type             string `json:"type"`
	ServiceAccountID string `json:"service_account_id"`
	ProjectID        string `json:"project_id,omitempty"`
	KeyID            string `json:"key_id"`
	Algorithm        string `json:"algorithm,omitempty"`
	PrivateKeyPEM    string `json:"private_key_pem"`
	// TokenURL is the token endpoint the server names as the audience; it
	// may differ from the URL a client reaches the server by (a proxy).
	TokenURL string `json:"token_url,omitempty"`
}

// ReadKeyFile reads a key file written by WriteKeyFile.
func ReadKeyFile(path string) (KeyFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return KeyFile{}, err
	}
	k, err := ParseKeyFile(b)
	if err != nil {
		return KeyFile{}, fmt.Errorf("%s is %w", path, err)
	}
	return k, nil
}

// ParseKeyFile reads the contents of a key file, e.g. from a secret store.
func ParseKeyFile(data []byte) (KeyFile, error) {
	var k KeyFile
	if err := json.Unmarshal(data, &k); err != nil || k.Type != KeyFileType {
		return KeyFile{}, fmt.Errorf("not a gpuaas service-account key file (JSON with type %q)", KeyFileType)
	}
	return k, nil
}

// WriteKeyFile writes a key file readable by its owner only. It refuses to
// overwrite an existing file.
func WriteKeyFile(path string, k KeyFile) error {
	b, err := json.MarshalIndent(k, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// ParsePrivateKeyPEM reads a PKCS#8 Ed25519 or ECDSA P-256 private key and
// returns it with its JWS algorithm.
func ParsePrivateKeyPEM(s string) (crypto.Signer, string, error) {
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, "", errors.New("the private key is not PEM")
	}
	var (
		k   any
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, "", fmt.Errorf("unsupported PEM block %q; want PRIVATE KEY (PKCS#8)", block.Type)
	}
	if err != nil {
		return nil, "", fmt.Errorf("parse private key: %w", err)
	}
	switch key := k.(type) {
	case ed25519.PrivateKey:
		return key, "EdDSA", nil
	case *ecdsa.PrivateKey:
		if key.Curve == elliptic.P256() {
			return key, "ES256", nil
		}
	}
	return nil, "", errors.New("only Ed25519 and ECDSA P-256 keys are supported")
}

// AssertionTTL is the lifetime of the assertions SignAssertion makes: just
// long enough for one exchange.
const AssertionTTL = 5 * time.Minute

// SignAssertion signs an RFC 7523 assertion with a service-account key:
// kid = key_id, iss = sub = the account id, aud = audience, a fresh jti,
// iat = now and exp = now + AssertionTTL. The private key never leaves the
// caller; only the assertion is sent.
func SignAssertion(k KeyFile, audience string, now time.Time) (string, error) {
	signer, alg, err := ParsePrivateKeyPEM(k.PrivateKeyPEM)
	if err != nil {
		return "", err
	}
	if k.ServiceAccountID == "" || k.KeyID == "" {
		return "", errors.New("the key needs service_account_id and key_id")
	}
	claims := jwt.RegisteredClaims{
		Issuer: k.ServiceAccountID, Subject: k.ServiceAccountID, Audience: jwt.ClaimStrings{audience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(AssertionTTL)), ID: uuid.NewString(),
	}
	t := jwt.NewWithClaims(jwt.GetSigningMethod(alg), claims)
	t.Header["kid"] = k.KeyID
	return t.SignedString(signer)
}

// TokenURL is the audience to sign for: the key file's, or this client's.
func (c *Client) TokenURL(k KeyFile) string {
	if k.TokenURL != "" {
		return k.TokenURL
	}
	return c.BaseURL + ServiceAccountTokenPath
}

// ServiceAccountTokenRequest is the RFC 7523 token exchange. The optional
// ids, when set, must equal the assertion's iss and kid.
type ServiceAccountTokenRequest struct {
	GrantType        string `json:"grant_type"` // GrantTypeJWTBearer
	Assertion        string `json:"assertion"`
	ServiceAccountID string `json:"service_account_id,omitempty"`
	KeyID            string `json:"key_id,omitempty"`
}

// ExchangeAssertion trades a signed assertion for an access token.
//
// Operation: exchangeServiceAccountToken
func (c *Client) ExchangeAssertion(ctx context.Context, assertion string) (Token, error) {
	var t Token
	err := c.Do(ctx, http.MethodPost, ServiceAccountTokenPath, nil,
		ServiceAccountTokenRequest{GrantType: GrantTypeJWTBearer, Assertion: assertion}, &t, onceOnly)
	return t, err
}

// ServiceAccountToken signs a fresh assertion with k, exchanges it and keeps
// the token on c.
func (c *Client) ServiceAccountToken(ctx context.Context, k KeyFile) (Token, error) {
	a, err := SignAssertion(k, c.TokenURL(k), time.Now())
	if err != nil {
		return Token{}, err
	}
	t, err := c.ExchangeAssertion(ctx, a)
	if err == nil {
		c.Token = t.AccessToken
	}
	return t, err
}

// TokenSource keeps a service-account token fresh for long-running
// automation: Token returns the current one, minting a new one a minute
// before it expires.
type TokenSource struct {
	c   *Client
	key KeyFile

	mu      sync.Mutex
	token   string
	renewAt time.Time
}

// NewTokenSource returns a token source using c (for its base URL) and k.
func NewTokenSource(c *Client, k KeyFile) *TokenSource {
	// The source mints over a copy of c's HTTP client, not c's own: the
	// usual next step installs Transport(…) on c.HTTP, and a renewal sent
	// through that transport would wait on the source's lock forever.
	hc := c.HTTP
	if hc != nil {
		own := *hc
		hc = &own
	}
	return &TokenSource{c: &Client{BaseURL: c.BaseURL, HTTP: hc, UserAgent: c.UserAgent, Retry: c.Retry}, key: k}
}

// Token returns a valid access token.
func (s *TokenSource) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && time.Now().Before(s.renewAt) {
		return s.token, nil
	}
	t, err := s.c.ServiceAccountToken(ctx, s.key)
	if err != nil {
		return "", err
	}
	s.token = t.AccessToken
	s.renewAt = time.Now().Add(time.Duration(t.ExpiresIn)*time.Second - time.Minute)
	return s.token, nil
}

// Transport returns a RoundTripper that sends each request through next
// (http.DefaultTransport when nil) with the source's current token (to the
// source's server only), so a Client whose HTTP.Transport it is calls as
// the service account for as long as it runs (a worker, an instance's own
// workload). A Client made so should leave its Token empty.
func (s *TokenSource) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	server, _ := url.Parse(s.c.BaseURL)
	return bearer{s, next, server}
}

type bearer struct {
	tokens *TokenSource
	next   http.RoundTripper
	server *url.URL // the server the token is for; nil if BaseURL does not parse
}

// RoundTrip adds the token to requests to the source's server alone: a
// transport runs again for each redirect, after net/http's own check, so
// without this a redirect to any host would receive the token.
func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.server == nil || !sameOrigin(b.server, r.URL) {
		r.Header.Del("Authorization")
		return b.next.RoundTrip(r)
	}
	tok, err := b.tokens.Token(r.Context())
	if err != nil {
		return nil, fmt.Errorf("service-account token: %w", err)
	}
	r.Header.Set("Authorization", "Bearer "+tok)
	return b.next.RoundTrip(r)
}
