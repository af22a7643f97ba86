package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
)

// ---- views ----

type registryInfoView struct {
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

type wrappedView struct {
	WrappingToken string `json:"wrapping_token"`
	UnwrapPath    string `json:"unwrap_path"`
	ExpiresAt     string `json:"expires_at"`
}

type intentView struct {
	ID                 string       `json:"id"`
	Kind               string       `json:"kind"`
	ProjectID          string       `json:"project_id"`
	AppSlug            string       `json:"app_slug"`
	AppVersion         string       `json:"app_version"`
	ArtifactName       string       `json:"artifact_name"`
	ArtifactKind       string       `json:"artifact_kind"`
	SourceType         string       `json:"source_type"`
	Channel            string       `json:"channel"`
	Registry           string       `json:"registry,omitempty"`
	Repository         string       `json:"repository,omitempty"`
	ImageRef           string       `json:"image_ref,omitempty"`
	TagHint            string       `json:"tag_hint,omitempty"`
	DigestRequired     bool         `json:"digest_required"`
	Digest             string       `json:"digest,omitempty"`
	ArtifactID         string       `json:"artifact_id,omitempty"`
	CredentialDelivery string       `json:"credential_delivery"`
	WrappedCredentials *wrappedView `json:"wrapped_credentials,omitempty"`
	SignatureRequired  bool         `json:"signature_required"`
	SignatureScheme    string       `json:"signature_scheme"`
	SigningKeyID       string       `json:"signing_key_id"`
	ProvenanceRequired bool         `json:"provenance_required"`
	UploadID           string       `json:"upload_id,omitempty"`
	UploadPath         string       `json:"upload_path,omitempty"`
	UploadURL          string       `json:"upload_url,omitempty"`
	SourceURI          string       `json:"source_uri,omitempty"`
	DownloadURL        string       `json:"download_url,omitempty"`
	ExpiresAt          string       `json:"expires_at"`
	CreatedAt          string       `json:"created_at"`
}

// writeIntent writes an intent whose wrapping token is shown once: an
// idempotent replay reports the credential as withheld.
func writeIntent(w http.ResponseWriter, v intentView) {
	redacted := v
	if v.WrappedCredentials != nil {
		redacted.WrappedCredentials, redacted.CredentialDelivery = nil, "withheld"
	}
	writeSecretJSON(w, http.StatusCreated, v, redacted)
}

func viewIntent(in artifacts.Intent) intentView {
	it := in.ArtifactIntent
	v := intentView{ID: it.ID, Kind: it.Kind, ProjectID: it.ProjectID, AppSlug: it.AppSlug, AppVersion: it.AppVersion,
		ArtifactName: it.ArtifactName, ArtifactKind: it.ArtifactKind, SourceType: it.SourceType, Channel: it.Channel,
		Registry: in.Registry, Repository: it.Repository, TagHint: it.TagHint, DigestRequired: true, ArtifactID: it.ArtifactID,
		CredentialDelivery: "none", SignatureRequired: it.SignatureRequired, SignatureScheme: it.SignatureScheme,
		SigningKeyID: it.SigningKeyID, ProvenanceRequired: it.ProvenanceRequired, UploadID: it.UploadID, SourceURI: it.SourceURI,
		ExpiresAt: rfc3339(it.ExpiresAt), CreatedAt: rfc3339(it.CreatedAt)}
	if in.Registry != "" && it.Repository != "" {
		v.ImageRef = in.Registry + "/" + it.Repository
	}
	if in.Artifact != nil {
		v.Digest = in.Artifact.Digest
		if v.ImageRef != "" {
			v.ImageRef += "@" + in.Artifact.Digest
		}
		if it.ArtifactKind == artifacts.KindBlob {
			v.DownloadURL = "/api/v1/projects/" + it.ProjectID + "/app-artifacts/" + it.ArtifactID + "/content"
		}
	}
	if in.Wrapped != nil {
		v.CredentialDelivery = "wrapped"
		v.WrappedCredentials = &wrappedView{WrappingToken: in.Wrapped.Token, UnwrapPath: "/api/v1/apps/registry/unwrap", ExpiresAt: rfc3339(in.Wrapped.ExpiresAt)}
	}
	if it.UploadID != "" {
		v.UploadPath = in.UploadPath
		v.UploadURL = "/api/v1/projects/" + it.ProjectID + "/artifact-uploads/" + it.UploadID
	}
	return v
}

type artifactView struct {
	ID                 string                     `json:"id"`
	ProjectID          string                     `json:"project_id"`
	AppSlug            string                     `json:"app_slug"`
	AppVersion         string                     `json:"app_version"`
	ArtifactName       string                     `json:"artifact_name"`
	ArtifactKind       string                     `json:"artifact_kind"`
	SourceType         string                     `json:"source_type"`
	Repository         string                     `json:"repository"`
	Digest             string                     `json:"digest"`
	Tag                string                     `json:"tag"`
	MediaType          string                     `json:"media_type"`
	SizeBytes          int64                      `json:"size_bytes"`
	SourceURI          string                     `json:"source_uri"`
	SourceMetadata     json.RawMessage            `json:"source_metadata,omitempty"`
	PublishIntentID    string                     `json:"publish_intent_id"`
	LifecycleState     artifacts.LifecycleState   `json:"lifecycle_state"`
	AllowedNextStates  []artifacts.LifecycleState `json:"allowed_next_states"`
	TrustState         artifacts.TrustState       `json:"trust_state"`
	TrustReason        string                     `json:"trust_reason"`
	TrustDetail        string                     `json:"trust_detail"`
	VerifiedKeyID      string                     `json:"verified_key_id"`
	VerifiedAt         string                     `json:"verified_at,omitempty"`
	SignatureRequired  bool                       `json:"signature_required"`
	SignatureScheme    string                     `json:"signature_scheme"`
	SigningKeyID       string                     `json:"signing_key_id"`
	ProvenanceRequired bool                       `json:"provenance_required"`
	Revoked            bool                       `json:"revoked"`
	RevokedAt          string                     `json:"revoked_at,omitempty"`
	RevokeReason       string                     `json:"revoke_reason"`
	CreatedBy          string                     `json:"created_by"`
	CreatedAt          string                     `json:"created_at"`
	UpdatedAt          string                     `json:"updated_at"`
}

func viewArtifact(a artifacts.AppArtifact) artifactView {
	next := artifacts.NextStates(a.LifecycleState)
	if !a.RevokedAt.IsZero() || next == nil {
		next = []artifacts.LifecycleState{}
	}
	return artifactView{ID: a.ID, ProjectID: a.ProjectID, AppSlug: a.AppSlug, AppVersion: a.AppVersion, ArtifactName: a.ArtifactName,
		ArtifactKind: a.ArtifactKind, SourceType: a.SourceType, Repository: a.Repository, Digest: a.Digest, Tag: a.Tag,
		MediaType: a.MediaType, SizeBytes: a.SizeBytes, SourceURI: a.SourceURI, SourceMetadata: a.SourceMetadata,
		PublishIntentID: a.PublishIntentID, LifecycleState: a.LifecycleState, AllowedNextStates: next, TrustState: a.TrustState,
		TrustReason: a.TrustReason, TrustDetail: a.TrustDetail, VerifiedKeyID: a.VerifiedKeyID, VerifiedAt: rfc3339(a.VerifiedAt),
		SignatureRequired: a.SignatureRequired, SignatureScheme: a.SignatureScheme, SigningKeyID: a.SigningKeyID,
		ProvenanceRequired: a.ProvenanceRequired, Revoked: !a.RevokedAt.IsZero(), RevokedAt: rfc3339(a.RevokedAt),
		RevokeReason: a.RevokeReason, CreatedBy: a.CreatedBy, CreatedAt: rfc3339(a.CreatedAt), UpdatedAt: rfc3339(a.UpdatedAt)}
}

type signingKeyView struct {
	ID          string `json:"id"`
	ProjectID   string `json:"project_id"`
	Name        string `json:"name"`
	Algorithm   string `json:"algorithm"`
	PublicKey   string `json:"public_key"`
	Fingerprint string `json:"fingerprint"`
	CreatedAt   string `json:"created_at"`
}

func viewSigningKey(k artifacts.ArtifactSigningKey) signingKeyView {
	return signingKeyView{ID: k.ID, ProjectID: k.ProjectID, Name: k.Name, Algorithm: k.Algorithm, PublicKey: k.PublicKey,
		Fingerprint: k.Fingerprint, CreatedAt: rfc3339(k.CreatedAt)}
}

type uploadView struct {
	UploadID  string `json:"upload_id"`
	IntentID  string `json:"intent_id"`
	SourceURI string `json:"source_uri"`
	Offset    int64  `json:"offset"`
	Committed bool   `json:"committed"`
	Digest    string `json:"digest,omitempty"`
	SizeBytes int64  `json:"size_bytes"`
	UpdatedAt string `json:"updated_at"`
}

func viewUpload(u artifacts.Upload) uploadView {
	v := uploadView{UploadID: u.ID, IntentID: u.IntentID, SourceURI: u.SourceURI, Offset: u.Offset, SizeBytes: u.Offset, UpdatedAt: rfc3339(u.UpdatedAt)}
	if u.Object != nil {
		v.Committed, v.Digest, v.SizeBytes = true, u.Object.Digest, u.Object.Size
	}
	return v
}

// ---- handlers ----

func (a *API) registryInfo(w http.ResponseWriter, r *http.Request) error {
	info, err := a.Artifacts.Info(r.Context(), grantsFrom(r.Context()))
	if err != nil {
		return err
	}
	scheme := "https://"
	if info.Insecure {
		scheme = "http://"
	}
	writeJSON(w, http.StatusOK, registryInfoView{RegistryHost: info.Host, RegistryURL: scheme + info.Host, Mode: info.Mode,
		NamespaceOwnershipMode: info.NamespaceOwnership, RepositoryTemplate: info.RepositoryTemplate, DigestOnlyDeployment: info.DigestOnly,
		ProjectPrivateRepositoriesEnabled: info.ProjectPrivate, TokenRealm: info.TokenRealm, TokenService: info.TokenService})
	return nil
}

func (a *API) unwrapCredentials(w http.ResponseWriter, r *http.Request) error {
	var in artifacts.UnwrapInput
	if err := decode(r, &in); err != nil {
		return err
	}
	sec, err := a.Artifacts.Unwrap(r.Context(), grantsFrom(r.Context()), in)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"username": sec.Username, "password": sec.Password, "registry": sec.Registry,
		"repository": sec.Repository, "actions": sec.Actions, "expires_at": rfc3339(sec.ExpiresAt)})
	return nil
}

func (a *API) createPublishIntent(w http.ResponseWriter, r *http.Request) error {
	var in artifacts.PublishIntentInput
	if err := decode(r, &in); err != nil {
		return err
	}
	it, err := a.Artifacts.CreatePublishIntent(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), in)
	if err != nil {
		return err
	}
	writeIntent(w, viewIntent(it))
	return nil
}

func (a *API) createPullIntent(w http.ResponseWriter, r *http.Request) error {
	var in artifacts.PullIntentInput
	if r.ContentLength != 0 {
		if err := decode(r, &in); err != nil {
			return err
		}
	}
	it, err := a.Artifacts.CreatePullIntent(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("artifact_id"), in)
	if err != nil {
		return err
	}
	writeIntent(w, viewIntent(it))
	return nil
}

func (a *API) registerArtifact(w http.ResponseWriter, r *http.Request) error {
	var in artifacts.RegisterInput
	if err := decode(r, &in); err != nil {
		return err
	}
	art, err := a.Artifacts.Register(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, viewArtifact(art))
	return nil
}

func (a *API) listArtifacts(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := artifacts.AppArtifactFilter{AppSlug: q.Get("app_slug"), AppVersion: q.Get("app_version"), ArtifactName: q.Get("artifact_name"),
		LifecycleState: artifacts.LifecycleState(q.Get("state")), TrustState: artifacts.TrustState(q.Get("trust_state"))}
	arts, next, err := a.Artifacts.List(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), f, pg)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(arts, next, viewArtifact))
	return nil
}

func (a *API) getArtifact(w http.ResponseWriter, r *http.Request) error {
	art, err := a.Artifacts.Get(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("artifact_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewArtifact(art))
	return nil
}

// artifactMove is a lifecycle method of the service, e.g. (*artifacts.Service).Promote.
type artifactMove func(s *artifacts.Service, ctx context.Context, g *iam.Grants, projectID, artifactID string, in artifacts.TransitionInput) (artifacts.AppArtifact, error)

// transitionArtifact serves promote, revoke, deprecate and retire.
func (a *API) transitionArtifact(move artifactMove) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var in artifacts.TransitionInput
		if err := decode(r, &in); err != nil {
			return err
		}
		art, err := move(a.Artifacts, r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("artifact_id"), in)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, viewArtifact(art))
		return nil
	}
}

func (a *API) verifyArtifact(w http.ResponseWriter, r *http.Request) error {
	var in artifacts.VerifyInput
	if r.ContentLength != 0 {
		if err := decode(r, &in); err != nil {
			return err
		}
	}
	art, err := a.Artifacts.Verify(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("artifact_id"), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewArtifact(art))
	return nil
}

func (a *API) artifactContent(w http.ResponseWriter, r *http.Request) error {
	art, rc, err := a.Artifacts.OpenContent(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("artifact_id"))
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(art.SizeBytes, 10))
	w.Header().Set("Docker-Content-Digest", art.Digest)
	w.Header().Set("ETag", `"`+art.Digest+`"`)
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := io.Copy(w, rc); err != nil {
		a.Logger.WarnContext(r.Context(), "blob download interrupted", "artifact_id", art.ID, "err", err)
	}
	return nil
}

func (a *API) createSigningKey(w http.ResponseWriter, r *http.Request) error {
	var in artifacts.SigningKeyInput
	if err := decode(r, &in); err != nil {
		return err
	}
	k, err := a.Artifacts.CreateSigningKey(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, viewSigningKey(k))
	return nil
}

func (a *API) listSigningKeys(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	ks, next, err := a.Artifacts.ListSigningKeys(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), pg)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(ks, next, viewSigningKey))
	return nil
}

// uploadOffset reads the chunk offset from Upload-Offset or Content-Range
// ("bytes <start>-<end>/<total or *>"); -1 means "at the current end".
func uploadOffset(r *http.Request) (int64, error) {
	if v := r.Header.Get("Upload-Offset"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, errdefs.Invalid("invalid_offset", "Upload-Offset must be a non-negative integer: the byte offset this chunk starts at")
		}
		return n, nil
	}
	if v := r.Header.Get("Content-Range"); v != "" {
		rest, ok := strings.CutPrefix(v, "bytes ")
		start, _, ok2 := strings.Cut(rest, "-")
		n, err := strconv.ParseInt(start, 10, 64)
		if !ok || !ok2 || err != nil || n < 0 {
			return 0, errdefs.Invalid("invalid_offset", "Content-Range must be 'bytes <start>-<end>/<total or *>'")
		}
		return n, nil
	}
	return -1, nil
}

func writeUpload(w http.ResponseWriter, status int, u artifacts.Upload) {
	w.Header().Set("Upload-Offset", strconv.FormatInt(u.Offset, 10))
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, viewUpload(u))
}

func (a *API) uploadStatus(w http.ResponseWriter, r *http.Request) error {
	u, err := a.Artifacts.UploadStatus(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("upload_id"))
	if err != nil {
		return err
	}
	writeUpload(w, http.StatusOK, u)
	return nil
}

func (a *API) uploadChunk(w http.ResponseWriter, r *http.Request) error {
	off, err := uploadOffset(r)
	if err != nil {
		return err
	}
	u, err := a.Artifacts.AppendUpload(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("upload_id"), off, r.Body)
	if err != nil {
		return err
	}
	writeUpload(w, http.StatusOK, u)
	return nil
}

func (a *API) uploadCommit(w http.ResponseWriter, r *http.Request) error {
	off, err := uploadOffset(r)
	if err != nil {
		return err
	}
	var body io.Reader
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		body = r.Body
	}
	u, err := a.Artifacts.CommitUpload(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("upload_id"), off, body, r.URL.Query().Get("digest"))
	if err != nil {
		return err
	}
	writeUpload(w, http.StatusCreated, u)
	return nil
}

func (a *API) uploadAbort(w http.ResponseWriter, r *http.Request) error {
	if err := a.Artifacts.AbortUpload(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("upload_id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) projectStorage(w http.ResponseWriter, r *http.Request) error {
	v, err := a.Artifacts.Storage(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"))
	if err != nil {
		return err
	}
	// The ETag versions the quota overrides only (the use beside them
	// changes all the time): it is what a PUT's If-Match is checked with.
	w.Header().Set("ETag", v.ETag)
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (a *API) putStorageQuota(w http.ResponseWriter, r *http.Request) error {
	var in artifacts.StorageQuotaInput
	if err := decode(r, &in); err != nil {
		return err
	}
	v, err := a.Artifacts.SetStorageQuota(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), in, ifMatch(r))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", v.ETag)
	writeJSON(w, http.StatusOK, v)
	return nil
}

// ifMatch is the request's If-Match entity tags, nil without the header
// (a list may come in one header or several).
func ifMatch(r *http.Request) []string {
	var tags []string
	for _, v := range r.Header.Values("If-Match") {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				tags = append(tags, t)
			}
		}
	}
	return tags
}
