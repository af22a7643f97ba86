package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// RegistryInfo is GET /api/v1/apps/registry.
type RegistryInfo struct {
	RegistryHost                      string `json:"registry_host"`
	RegistryURL                       string `json:"registry_url"`
	Mode                              string `json:"mode"`
	NamespaceOwnershipMode            string `json:"namespace_ownership_mode"`
	RepositoryTemplate                string `json:"repository_template"`
	DigestOnlyDeployment              bool   `json:"digest_only_deployment"`
	ProjectPrivateRepositoriesEnabled bool   `json:"project_private_repositories_enabled"`
	TokenRealm                        string `json:"token_realm"`
	TokenService                      string `json:"token_service"`
}

// PublishIntentRequest asks for a publish intent.
type PublishIntentRequest struct {
	AppSlug            string `json:"app_slug"`
	AppVersion         string `json:"app_version"`
	ArtifactName       string `json:"artifact_name"`
	ArtifactKind       string `json:"artifact_kind,omitempty"`
	SourceType         string `json:"source_type,omitempty"`
	Channel            string `json:"channel,omitempty"`
	SignatureRequired  *bool  `json:"signature_required,omitempty"`
	SigningKeyID       string `json:"signing_key_id,omitempty"`
	ProvenanceRequired bool   `json:"provenance_required,omitempty"`
	TTLSeconds         int    `json:"ttl_seconds,omitempty"`
}

// WrappedCredentials is a single-use wrapping token.
type WrappedCredentials struct {
	WrappingToken string `json:"wrapping_token"`
	UnwrapPath    string `json:"unwrap_path"`
	ExpiresAt     string `json:"expires_at"`
}

// ArtifactIntent is a publish or pull intent.
type ArtifactIntent struct {
	ID                 string              `json:"id"`
	Kind               string              `json:"kind"`
	ProjectID          string              `json:"project_id"`
	AppSlug            string              `json:"app_slug"`
	AppVersion         string              `json:"app_version"`
	ArtifactName       string              `json:"artifact_name"`
	ArtifactKind       string              `json:"artifact_kind"`
	SourceType         string              `json:"source_type"`
	Channel            string              `json:"channel"`
	Registry           string              `json:"registry"`
	Repository         string              `json:"repository"`
	ImageRef           string              `json:"image_ref"`
	TagHint            string              `json:"tag_hint"`
	DigestRequired     bool                `json:"digest_required"`
	Digest             string              `json:"digest"`
	ArtifactID         string              `json:"artifact_id"`
	CredentialDelivery string              `json:"credential_delivery"`
	WrappedCredentials *WrappedCredentials `json:"wrapped_credentials"`
	SignatureRequired  bool                `json:"signature_required"`
	SignatureScheme    string              `json:"signature_scheme"`
	SigningKeyID       string              `json:"signing_key_id"`
	ProvenanceRequired bool                `json:"provenance_required"`
	UploadID           string              `json:"upload_id"`
	UploadPath         string              `json:"upload_path"`
	UploadURL          string              `json:"upload_url"`
	SourceURI          string              `json:"source_uri"`
	DownloadURL        string              `json:"download_url"`
	ExpiresAt          string              `json:"expires_at"`
	CreatedAt          string              `json:"created_at"`
}

// RegistryCredentials are unwrapped registry credentials (secret).
type RegistryCredentials struct {
	Username   string   `json:"username"`
	Password   string   `json:"password"`
	Registry   string   `json:"registry"`
	Repository string   `json:"repository"`
	Actions    []string `json:"actions"`
	ExpiresAt  string   `json:"expires_at"`
}

// RegisterArtifactRequest registers a pushed digest or an uploaded blob.
type RegisterArtifactRequest struct {
	AppSlug         string          `json:"app_slug"`
	AppVersion      string          `json:"app_version"`
	ArtifactName    string          `json:"artifact_name"`
	ArtifactKind    string          `json:"artifact_kind,omitempty"`
	SourceType      string          `json:"source_type,omitempty"`
	Repository      string          `json:"repository,omitempty"`
	Digest          string          `json:"digest"`
	Tag             string          `json:"tag,omitempty"`
	MediaType       string          `json:"media_type,omitempty"`
	SourceURI       string          `json:"source_uri,omitempty"`
	SourceMetadata  json.RawMessage `json:"source_metadata,omitempty"`
	PublishIntentID string          `json:"publish_intent_id,omitempty"`
}

// AppArtifact is a registered artifact.
type AppArtifact struct {
	ID                 string          `json:"id"`
	ProjectID          string          `json:"project_id"`
	AppSlug            string          `json:"app_slug"`
	AppVersion         string          `json:"app_version"`
	ArtifactName       string          `json:"artifact_name"`
	ArtifactKind       string          `json:"artifact_kind"`
	SourceType         string          `json:"source_type"`
	Repository         string          `json:"repository"`
	Digest             string          `json:"digest"`
	Tag                string          `json:"tag"`
	MediaType          string          `json:"media_type"`
	SizeBytes          int64           `json:"size_bytes"`
	SourceURI          string          `json:"source_uri"`
	SourceMetadata     json.RawMessage `json:"source_metadata,omitempty"`
	PublishIntentID    string          `json:"publish_intent_id"`
	LifecycleState     string          `json:"lifecycle_state"`
	AllowedNextStates  []string        `json:"allowed_next_states"`
	TrustState         string          `json:"trust_state"`
	TrustReason        string          `json:"trust_reason"`
	TrustDetail        string          `json:"trust_detail"`
	VerifiedKeyID      string          `json:"verified_key_id"`
	VerifiedAt         string          `json:"verified_at,omitempty"`
	SignatureRequired  bool            `json:"signature_required"`
	SignatureScheme    string          `json:"signature_scheme"`
	SigningKeyID       string          `json:"signing_key_id"`
	ProvenanceRequired bool            `json:"provenance_required"`
	Revoked            bool            `json:"revoked"`
	RevokedAt          string          `json:"revoked_at,omitempty"`
	RevokeReason       string          `json:"revoke_reason"`
	CreatedBy          string          `json:"created_by"`
	CreatedAt          string          `json:"created_at"`
	UpdatedAt          string          `json:"updated_at"`
}

// ArtifactFilter narrows ListArtifacts.
type ArtifactFilter struct {
	AppSlug, AppVersion, ArtifactName, State, TrustState, Cursor string
	Limit                                                        int
}

// ArtifactSigningKey is a registered signing public key.
type ArtifactSigningKey struct {
	ID          string `json:"id"`
	ProjectID   string `json:"project_id"`
	Name        string `json:"name"`
	Algorithm   string `json:"algorithm"`
	PublicKey   string `json:"public_key"`
	Fingerprint string `json:"fingerprint"`
	CreatedAt   string `json:"created_at"`
}

// ArtifactUpload is the state of a blob upload.
type ArtifactUpload struct {
	UploadID  string `json:"upload_id"`
	IntentID  string `json:"intent_id"`
	SourceURI string `json:"source_uri"`
	Offset    int64  `json:"offset"`
	Committed bool   `json:"committed"`
	Digest    string `json:"digest"`
	SizeBytes int64  `json:"size_bytes"`
	UpdatedAt string `json:"updated_at"`
}

type pullIntentRequest struct {
	TTLSeconds int `json:"ttl_seconds,omitempty"`
}

type unwrapRequest struct {
	WrappingToken string `json:"wrapping_token"`
}

// artifactTransitionRequest is the body of every artifact transition;
// target_state is promote's alone.
type artifactTransitionRequest struct {
	TargetState string `json:"target_state,omitempty"`
	Reason      string `json:"reason"`
}

type signingKeyRequest struct {
	Name      string `json:"name"`
	PublicKey string `json:"public_key"`
}

func artifactsPath(projectID string) string {
	return "/api/v1/projects/" + url.PathEscape(projectID) + "/app-artifacts"
}

// RegistryInfo reads the registry contract.
//
// Operation: getAppRegistryInfo
func (c *Client) RegistryInfo(ctx context.Context) (RegistryInfo, error) {
	var out RegistryInfo
	return out, c.Do(ctx, "GET", "/api/v1/apps/registry", nil, nil, &out)
}

// CreatePublishIntent asks for a publish intent.
//
// Operation: createArtifactPublishIntent
func (c *Client) CreatePublishIntent(ctx context.Context, projectID string, in PublishIntentRequest) (ArtifactIntent, error) {
	var out ArtifactIntent
	return out, c.Do(ctx, "POST", artifactsPath(projectID)+"/publish-intents", nil, in, &out)
}

// CreatePullIntent asks for a pull intent of an artifact.
//
// Operation: createArtifactPullIntent
func (c *Client) CreatePullIntent(ctx context.Context, projectID, artifactID string) (ArtifactIntent, error) {
	var out ArtifactIntent
	return out, c.Do(ctx, "POST", artifactsPath(projectID)+"/"+url.PathEscape(artifactID)+"/pull-intents", nil, pullIntentRequest{}, &out)
}

// Unwrap exchanges a wrapping token for registry credentials (once).
//
// Operation: unwrapRegistryCredential
func (c *Client) Unwrap(ctx context.Context, wrappingToken string) (RegistryCredentials, error) {
	var out RegistryCredentials
	return out, c.Do(ctx, "POST", "/api/v1/apps/registry/unwrap", nil, unwrapRequest{WrappingToken: wrappingToken}, &out, onceOnly)
}

// RegisterArtifact registers a pushed digest or uploaded blob.
//
// Operation: registerArtifact
func (c *Client) RegisterArtifact(ctx context.Context, projectID string, in RegisterArtifactRequest) (AppArtifact, error) {
	var out AppArtifact
	return out, c.Do(ctx, "POST", artifactsPath(projectID), nil, in, &out)
}

// ListArtifacts lists a project's artifacts (one page).
//
// Operation: listArtifacts
func (c *Client) ListArtifacts(ctx context.Context, projectID string, f ArtifactFilter) ([]AppArtifact, string, error) {
	q := listQuery(map[string]string{"app_slug": f.AppSlug, "app_version": f.AppVersion, "artifact_name": f.ArtifactName,
		"state": f.State, "trust_state": f.TrustState, "cursor": f.Cursor}, f.Limit)
	var out CatalogPage[AppArtifact]
	err := c.Do(ctx, "GET", artifactsPath(projectID), q, nil, &out)
	return out.Items, out.NextCursor, err
}

// GetArtifact reads one artifact.
//
// Operation: getArtifact
func (c *Client) GetArtifact(ctx context.Context, projectID, artifactID string) (AppArtifact, error) {
	var out AppArtifact
	return out, c.Do(ctx, "GET", artifactsPath(projectID)+"/"+url.PathEscape(artifactID), nil, nil, &out)
}

// TransitionArtifact runs promote, verify, revoke, deprecate or retire.
// target is only meaningful for promote ("" = next state).
//
// Operation: promoteArtifact verifyArtifact revokeArtifact deprecateArtifact retireArtifact
func (c *Client) TransitionArtifact(ctx context.Context, projectID, artifactID, action, target, reason string) (AppArtifact, error) {
	body := artifactTransitionRequest{TargetState: target, Reason: reason}
	var out AppArtifact
	return out, c.Do(ctx, "POST", artifactsPath(projectID)+"/"+url.PathEscape(artifactID)+"/"+action, nil, body, &out)
}

// CreateSigningKey registers a signing public key (PEM).
//
// Operation: registerArtifactSigningKey
func (c *Client) CreateSigningKey(ctx context.Context, projectID, name, publicKeyPEM string) (ArtifactSigningKey, error) {
	var out ArtifactSigningKey
	return out, c.Do(ctx, "POST", "/api/v1/projects/"+url.PathEscape(projectID)+"/artifact-signing-keys", nil,
		signingKeyRequest{Name: name, PublicKey: publicKeyPEM}, &out)
}

// ListSigningKeys lists a project's signing keys (one page).
//
// Operation: listArtifactSigningKeys
func (c *Client) ListSigningKeys(ctx context.Context, projectID string) ([]ArtifactSigningKey, error) {
	var out CatalogPage[ArtifactSigningKey]
	return out.Items, c.Do(ctx, "GET", "/api/v1/projects/"+url.PathEscape(projectID)+"/artifact-signing-keys", nil, nil, &out)
}

// UploadBlob streams r (size bytes) to a blob intent's upload URL in chunks
// of chunkSize (each PATCH names its Upload-Offset, starting at 0), then
// commits with the sha256 computed while streaming. progress (may be nil) sees the bytes sent.
// It returns the digest.
//
// Operation: appendArtifactUpload completeArtifactUpload
func (c *Client) UploadBlob(ctx context.Context, uploadURL string, r io.Reader, size, chunkSize int64, progress func(sent int64)) (string, error) {
	// uploadURL comes from the server and is appended to BaseURL: text
	// that is not a path ("@host/…", ".example.net/…") would name another
	// host, which would then get the bytes and the token.
	if !strings.HasPrefix(uploadURL, "/") {
		return "", fmt.Errorf("the publish intent's upload_url %q is not a path on the API: not sending the file (or the token) elsewhere", uploadURL)
	}
	if chunkSize <= 0 {
		chunkSize = 64 << 20
	}
	h := sha256.New()
	tee := io.TeeReader(r, h)
	var off int64
	for off < size {
		n := min(chunkSize, size-off)
		req, err := http.NewRequestWithContext(ctx, "PATCH", c.BaseURL+uploadURL, io.LimitReader(tee, n))
		if err != nil {
			return "", err
		}
		req.ContentLength = n
		req.Header.Set("Upload-Offset", strconv.FormatInt(off, 10))
		req.Header.Set("Content-Type", "application/octet-stream")
		if err := c.raw(req, nil); err != nil {
			return "", err
		}
		off += n
		if progress != nil {
			progress(off)
		}
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	req, err := http.NewRequestWithContext(ctx, "PUT", c.BaseURL+uploadURL+"?digest="+url.QueryEscape(digest), nil)
	if err != nil {
		return "", err
	}
	if err := c.raw(req, nil); err != nil {
		return "", err
	}
	return digest, nil
}

func uploadPath(projectID, uploadID string) string {
	return "/api/v1/projects/" + url.PathEscape(projectID) + "/artifact-uploads/" + url.PathEscape(uploadID)
}

// GetArtifactUpload reads a blob upload's state: the offset to resume at.
//
// Operation: getArtifactUpload
func (c *Client) GetArtifactUpload(ctx context.Context, projectID, uploadID string) (ArtifactUpload, error) {
	var out ArtifactUpload
	return out, c.Do(ctx, "GET", uploadPath(projectID, uploadID), nil, nil, &out)
}

// CancelArtifactUpload aborts a blob upload.
//
// Operation: cancelArtifactUpload
func (c *Client) CancelArtifactUpload(ctx context.Context, projectID, uploadID string) error {
	return c.Do(ctx, "DELETE", uploadPath(projectID, uploadID), nil, nil, nil)
}

// DownloadArtifact streams a blob artifact's content into w and returns
// its digest as the server names it (Docker-Content-Digest).
//
// Operation: getArtifactContent
func (c *Client) DownloadArtifact(ctx context.Context, projectID, artifactID string, w io.Writer) (string, error) {
	h, err := c.download(ctx, artifactsPath(projectID)+"/"+url.PathEscape(artifactID)+"/content", nil, "application/octet-stream", w)
	if err != nil {
		return "", err
	}
	return h.Get("Docker-Content-Digest"), nil
}

// raw sends a non-JSON request and decodes a JSON answer or error envelope.
func (c *Client) raw(req *http.Request, out any) error {
	c.authorize(req)
	return c.send(req, out, 1<<20)
}
