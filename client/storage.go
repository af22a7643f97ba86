package client

import (
	"context"
	"net/url"
)

// ProjectStorage is a project's blob and registry storage quotas with
// what it uses.
type ProjectStorage struct {
	// ETag is the version of the project's quota overrides (the answer's
	// ETag header): pass it to PutProjectStorageQuota with WithIfMatch so
	// a change based on this read cannot overwrite one made since.
	ETag      string          `json:"-"`
	ProjectID string          `json:"project_id"`
	Blobs     BlobStorage     `json:"blobs"`
	Registry  RegistryStorage `json:"registry"`
}

// BlobStorage is the blob quota in force (QuotaBytes nil: none) and its
// use, in parts. QuotaSource is "project" (a platform admin's override)
// or "platform" (the server's default). OverQuota: the quota was lowered
// below what the project holds; new uploads are refused.
type BlobStorage struct {
	QuotaBytes        *int64 `json:"quota_bytes"`
	QuotaSource       string `json:"quota_source"`
	UsedBytes         int64  `json:"used_bytes"`
	OverQuota         bool   `json:"over_quota"`
	RegisteredBytes   int64  `json:"registered_bytes"`
	UnregisteredBytes int64  `json:"unregistered_bytes"`
	UploadingBytes    int64  `json:"uploading_bytes"`
}

// RegistryStorage is the embedded registry's quota in force and its use.
type RegistryStorage struct {
	QuotaBytes     *int64 `json:"quota_bytes"`
	QuotaSource    string `json:"quota_source"`
	UsedBytes      int64  `json:"used_bytes"`
	OverQuota      bool   `json:"over_quota"`
	CommittedBytes int64  `json:"committed_bytes"`
	HeldBytes      int64  `json:"held_bytes"`
}

// ProjectStorageQuotaInput replaces a project's quota overrides; a nil
// one means the platform's default, 0 means nothing more may be stored.
type ProjectStorageQuotaInput struct {
	BlobQuotaBytes     *int64 `json:"blob_quota_bytes"`
	RegistryQuotaBytes *int64 `json:"registry_quota_bytes"`
}

// GetProjectStorage reads a project's storage quotas and use.
//
// Operation: getProjectStorage
func (c *Client) GetProjectStorage(ctx context.Context, projectID string) (ProjectStorage, error) {
	var out ProjectStorage
	h, err := c.doWithHeader(ctx, "GET", "/api/v1/projects/"+url.PathEscape(projectID)+"/storage", nil, &out)
	if err != nil {
		return ProjectStorage{}, err
	}
	out.ETag = h.Get("ETag")
	return out, nil
}

// PutProjectStorageQuota sets or clears a project's quota overrides
// (platform admins only). With WithIfMatch(read.ETag) it is refused (an
// *APIError with Status 412, Code "storage_quota_changed") when they
// changed since that read; without it the last writer wins.
//
// Operation: putProjectStorageQuota
func (c *Client) PutProjectStorageQuota(ctx context.Context, projectID string, in ProjectStorageQuotaInput, opts ...RequestOption) (ProjectStorage, error) {
	var out ProjectStorage
	h, err := c.doWithHeader(ctx, "PUT", "/api/v1/projects/"+url.PathEscape(projectID)+"/storage/quota", in, &out, opts...)
	if err != nil {
		return ProjectStorage{}, err
	}
	out.ETag = h.Get("ETag")
	return out, nil
}
