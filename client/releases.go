package client

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// PlatformReleaseArtifact is one downloadable file of a platform release.
type PlatformReleaseArtifact struct {
	Name        string `json:"name"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	Kind        string `json:"kind"` // cli | agent | sdk | template
	MediaType   string `json:"media_type"`
	Digest      string `json:"digest"` // sha256:<hex>
	Size        int64  `json:"size"`
	DownloadURL string `json:"download_url"`
}

// PlatformRelease is a published release of the platform's own builds.
type PlatformRelease struct {
	Version      string                    `json:"version"`
	PublishedAt  time.Time                 `json:"published_at"`
	SigningKeyID string                    `json:"signing_key_id"`
	ManifestURL  string                    `json:"manifest_url"`
	SignatureURL string                    `json:"signature_url"`
	Artifacts    []PlatformReleaseArtifact `json:"artifacts"`
}

// PlatformReleaseList is the release catalog, newest first.
type PlatformReleaseList struct {
	Items []PlatformRelease `json:"items"`
}

// PlatformReleaseManifest is the signed manifest document.
type PlatformReleaseManifest struct {
	Schema      string                            `json:"schema"`
	Version     string                            `json:"version"`
	PublishedAt time.Time                         `json:"published_at"`
	Artifacts   []PlatformReleaseManifestArtifact `json:"artifacts"`
}

// PlatformReleaseManifestArtifact is one artifact of the signed manifest.
type PlatformReleaseManifestArtifact struct {
	Name      string `json:"name"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	Kind      string `json:"kind"`
	MediaType string `json:"media_type"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

const releasesPath = "/api/v1/platform/releases"

func releasePath(version string) string { return releasesPath + "/" + url.PathEscape(version) }

// ListPlatformReleases lists published releases, newest first (no token needed).
//
// Operation: listPlatformReleases
func (c *Client) ListPlatformReleases(ctx context.Context) (PlatformReleaseList, error) {
	var out PlatformReleaseList
	err := c.Do(ctx, http.MethodGet, releasesPath, nil, nil, &out)
	return out, err
}

// GetPlatformRelease reads a published release.
//
// Operation: getPlatformRelease
func (c *Client) GetPlatformRelease(ctx context.Context, version string) (PlatformRelease, error) {
	var out PlatformRelease
	err := c.Do(ctx, http.MethodGet, releasePath(version), nil, nil, &out)
	return out, err
}

// GetPlatformReleaseSigningKey returns the release signing public key (PEM).
//
// Operation: getPlatformReleaseSigningKey
func (c *Client) GetPlatformReleaseSigningKey(ctx context.Context) ([]byte, error) {
	return c.document(ctx, releasesPath+"/signing-key", "application/x-pem-file")
}

// GetPlatformReleaseManifest returns the exact signed manifest bytes.
//
// Operation: getPlatformReleaseManifest
func (c *Client) GetPlatformReleaseManifest(ctx context.Context, version string) ([]byte, error) {
	return c.document(ctx, releasePath(version)+"/manifest", "application/json")
}

// GetPlatformReleaseManifestSignature returns the base64 DER ECDSA-SHA256
// signature over the manifest bytes.
//
// Operation: getPlatformReleaseManifestSignature
func (c *Client) GetPlatformReleaseManifestSignature(ctx context.Context, version string) (string, error) {
	b, err := c.document(ctx, releasePath(version)+"/manifest.sig", "text/plain")
	return string(b), err
}

// DownloadPlatformReleaseArtifact streams an artifact into w and returns its
// digest (sha256:<hex>), checked against the bytes received: a mismatch is
// an error (w has then received bad bytes and must be discarded).
//
// Operation: downloadPlatformReleaseArtifact
func (c *Client) DownloadPlatformReleaseArtifact(ctx context.Context, version, name string, w io.Writer) (string, error) {
	h := sha256.New()
	hdr, err := c.download(ctx, releasePath(version)+"/artifacts/"+url.PathEscape(name), nil, "application/octet-stream", io.MultiWriter(w, h))
	if err != nil {
		return "", err
	}
	got := h.Sum(nil)
	if want := hdr.Get("Digest"); want != "" && want != "sha-256="+base64.StdEncoding.EncodeToString(got) {
		return "", fmt.Errorf("download %s %s: the bytes received do not match the Digest header %s", version, name, want)
	}
	return "sha256:" + hex.EncodeToString(got), nil
}

// UploadPlatformReleaseArtifact streams one artifact of a draft release
// (platform admins); size is its length, digest (sha256:<hex>, optional)
// what the server must find.
//
// Operation: uploadPlatformReleaseArtifact
func (c *Client) UploadPlatformReleaseArtifact(ctx context.Context, version, name, goos, arch, kind string, r io.Reader, size int64, digest string) (PlatformReleaseArtifact, error) {
	q := url.Values{"os": {goos}, "arch": {arch}, "kind": {kind}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.BaseURL+"/api/v1/admin/platform/releases/"+url.PathEscape(version)+"/artifacts/"+url.PathEscape(name)+"?"+q.Encode(), r)
	if err != nil {
		return PlatformReleaseArtifact{}, err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	if hexPart, ok := cutSHA256(digest); ok {
		raw, err := hex.DecodeString(hexPart)
		if err != nil {
			return PlatformReleaseArtifact{}, fmt.Errorf("digest %q: %w", digest, err)
		}
		req.Header.Set("Digest", "sha-256="+base64.StdEncoding.EncodeToString(raw))
	}
	var out PlatformReleaseArtifact
	err = c.raw(req, &out)
	return out, err
}

func cutSHA256(d string) (string, bool) {
	if len(d) == len("sha256:")+64 && d[:7] == "sha256:" {
		return d[7:], true
	}
	return "", false
}

// PublishPlatformRelease signs and publishes a draft release (platform admins).
//
// Operation: publishPlatformRelease
func (c *Client) PublishPlatformRelease(ctx context.Context, version string, opts ...RequestOption) (PlatformRelease, error) {
	var out PlatformRelease
	err := c.Do(ctx, http.MethodPost, "/api/v1/admin/platform/releases/"+url.PathEscape(version)+"/publish", nil, nil, &out, opts...)
	return out, err
}
