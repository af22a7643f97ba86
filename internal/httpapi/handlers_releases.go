package httpapi

import (
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/releases"
)

// releaseView is a published release as the API shows it.
type releaseView struct {
	Version      string                `json:"version"`
	PublishedAt  time.Time             `json:"published_at"`
	SigningKeyID string                `json:"signing_key_id"`
	ManifestURL  string                `json:"manifest_url"`
	SignatureURL string                `json:"signature_url"`
	Artifacts    []releaseArtifactView `json:"artifacts"`
}

type releaseArtifactView struct {
	releases.ManifestArtifact
	DownloadURL string `json:"download_url"`
}

func (a *API) releasesService() (*releases.Service, error) {
	if a.Releases == nil {
		return nil, errdefs.FailedPrecondition("releases_disabled", "this server serves no platform releases")
	}
	return a.Releases, nil
}

func (a *API) releaseURL(version string) string {
	base := ""
	if a.PublicURL != nil {
		base = a.PublicURL()
	}
	return base + "/api/v1/platform/releases/" + url.PathEscape(version)
}

func (a *API) viewRelease(r releases.Release, arts []releases.Artifact) releaseView {
	u := a.releaseURL(r.Version)
	v := releaseView{Version: r.Version, PublishedAt: r.PublishedAt, SigningKeyID: r.SigningKID,
		ManifestURL: u + "/manifest", SignatureURL: u + "/manifest.sig", Artifacts: []releaseArtifactView{}}
	for _, x := range arts {
		v.Artifacts = append(v.Artifacts, a.viewReleaseArtifact(x))
	}
	return v
}

func (a *API) viewReleaseArtifact(x releases.Artifact) releaseArtifactView {
	return releaseArtifactView{ManifestArtifact: releases.Entry(x), DownloadURL: a.releaseURL(x.Version) + "/artifacts/" + url.PathEscape(x.Name)}
}

func (a *API) listPlatformReleases(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.releasesService()
	if err != nil {
		return err
	}
	rels, err := svc.List(r.Context(), 0)
	if err != nil {
		return err
	}
	items := []releaseView{}
	for _, rel := range rels {
		_, arts, err := svc.Get(r.Context(), rel.Version)
		if err != nil {
			return err
		}
		items = append(items, a.viewRelease(rel, arts))
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
	return nil
}

func (a *API) getPlatformRelease(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.releasesService()
	if err != nil {
		return err
	}
	rel, arts, err := svc.Get(r.Context(), r.PathValue("version"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.viewRelease(rel, arts))
	return nil
}

func (a *API) getReleaseSigningKey(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.releasesService()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-pem-file")
	_, _ = w.Write(svc.PublicKeyPEM())
	return nil
}

// pathRelease is the release the request's {version} names.
func (a *API) pathRelease(r *http.Request) (releases.Release, error) {
	svc, err := a.releasesService()
	if err != nil {
		return releases.Release{}, err
	}
	rel, _, err := svc.Get(r.Context(), r.PathValue("version"))
	return rel, err
}

func (a *API) getReleaseManifest(w http.ResponseWriter, r *http.Request) error {
	rel, err := a.pathRelease(r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(rel.Manifest)
	return nil
}

func (a *API) getReleaseSignature(w http.ResponseWriter, r *http.Request) error {
	rel, err := a.pathRelease(r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, rel.Signature)
	return nil
}

// downloadReleaseArtifact streams an artifact; http.ServeContent answers
// Range (206) and If-None-Match (304) against the digest ETag.
func (a *API) downloadReleaseArtifact(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.releasesService()
	if err != nil {
		return err
	}
	art, rc, err := svc.Open(r.Context(), r.PathValue("version"), r.PathValue("name"))
	if err != nil {
		return err
	}
	defer rc.Close()
	hexDigest := strings.TrimPrefix(art.Digest, "sha256:")
	raw, err := hex.DecodeString(hexDigest)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", art.MediaType)
	h.Set("Digest", "sha-256="+base64.StdEncoding.EncodeToString(raw))
	h.Set("ETag", `"sha256:`+hexDigest+`"`)
	h.Set("Content-Disposition", `attachment; filename="`+art.Name+`"`)
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	http.ServeContent(w, r, "", time.Time{}, rc)
	return nil
}

func (a *API) uploadReleaseArtifact(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.releasesService()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	in := releases.UploadInput{Version: r.PathValue("version"), Name: r.PathValue("name"), OS: q.Get("os"), Arch: q.Get("arch"),
		Kind: releases.Kind(q.Get("kind")), Body: r.Body}
	if ct := r.Header.Get("Content-Type"); ct != "" && ct != "application/octet-stream" {
		in.MediaType = ct
	}
	if d := r.Header.Get("Digest"); d != "" {
		b64, ok := strings.CutPrefix(d, "sha-256=")
		raw, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || len(raw) != 32 {
			return errdefs.Invalid("invalid_digest_header", "the Digest header %q is not sha-256=<base64 of 32 bytes>", d)
		}
		in.Digest = "sha256:" + hex.EncodeToString(raw)
	}
	art, err := svc.Upload(r.Context(), grantsFrom(r.Context()), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, a.viewReleaseArtifact(art))
	return nil
}

func (a *API) publishPlatformRelease(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.releasesService()
	if err != nil {
		return err
	}
	rel, arts, err := svc.Publish(r.Context(), grantsFrom(r.Context()), r.PathValue("version"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.viewRelease(rel, arts))
	return nil
}
