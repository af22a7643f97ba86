// Package releases is the platform's catalog of its own releases: the CLI,
// agent, SDK and template builds it serves for download. Platform admins
// upload artifacts into a draft and publish it; publishing builds the
// manifest, signs it with the platform's ECDSA P-256 release key (cosign
// verify-blob compatible) and freezes the release. Anyone may read
// published releases and download their artifacts.
package releases

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/blobstore"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// EventPublished is emitted when a release is published.
const EventPublished = "platform.release.published"

// ManifestSchema names the signed manifest's format.
const ManifestSchema = "gpuaas.release/v1"

// DefaultMaxArtifactBytes bounds one uploaded artifact when Deps leaves it 0.
const DefaultMaxArtifactBytes = 1 << 30

// Blobs is where artifact bytes live: content-addressed, streamed.
type Blobs interface {
	// PutContent stores r; content over maxBytes or not of the expected
	// digest (when set) is refused and leaves nothing behind.
	PutContent(ctx context.Context, r io.Reader, maxBytes int64, expected string) (digest string, size int64, err error)
	OpenContent(ctx context.Context, digest string) (io.ReadSeekCloser, int64, error)
}

// Deps is what the service needs.
type Deps struct {
	Store            Store
	IAM              *iam.Service
	Blobs            Blobs
	Key              *SigningKey
	Logger           *slog.Logger
	Now              func() time.Time
	MaxArtifactBytes int64
}

// Service is the releases domain.
type Service struct{ Deps }

// New builds the service.
func New(d Deps) *Service {
	d.Now = clock.Or(d.Now)
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.MaxArtifactBytes <= 0 {
		d.MaxArtifactBytes = DefaultMaxArtifactBytes
	}
	return &Service{d}
}

// Manifest is the signed document of a published release.
type Manifest struct {
	Schema      string             `json:"schema"`
	Version     string             `json:"version"`
	PublishedAt time.Time          `json:"published_at"`
	Artifacts   []ManifestArtifact `json:"artifacts"`
}

// ManifestArtifact is one artifact in the manifest.
type ManifestArtifact struct {
	Name      string `json:"name"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	Kind      Kind   `json:"kind"`
	MediaType string `json:"media_type"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

var (
	versionRE   = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
	nameRE      = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	platformRE  = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)
	mediaTypeRE = regexp.MustCompile(`^[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*$`)
	digestRE    = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
)

// ValidVersion reports whether v is a semantic version (optionally with a
// leading v, a pre-release and build metadata).
func ValidVersion(v string) bool { return len(v) <= 128 && versionRE.MatchString(v) }

// UploadInput is one artifact upload.
type UploadInput struct {
	Version, Name, OS, Arch string
	Kind                    Kind
	MediaType               string // default application/octet-stream
	Digest                  string // optional: sha256:<hex> the content must have
	Body                    io.Reader
}

func (in *UploadInput) check() error {
	var fe []errdefs.FieldError
	bad := func(field, msg string) {
		fe = append(fe, errdefs.FieldError{Field: field, Code: "invalid", Message: msg})
	}
	if !ValidVersion(in.Version) {
		bad("version", "want a semantic version like 1.2.3 or 1.2.3-rc.1")
	}
	if !nameRE.MatchString(in.Name) {
		bad("name", "want lowercase letters, digits, '.', '_' or '-', starting with a letter or digit, at most 128 characters (e.g. gpuaas-linux-amd64)")
	}
	if !platformRE.MatchString(in.OS) {
		bad("os", "want a GOOS-style name like linux, darwin, windows, or any")
	}
	if !platformRE.MatchString(in.Arch) {
		bad("arch", "want a GOARCH-style name like amd64, arm64, or any")
	}
	switch in.Kind {
	case KindCLI, KindAgent, KindSDK, KindTemplate:
	default:
		bad("kind", "want one of cli, agent, sdk, template")
	}
	if in.MediaType == "" {
		in.MediaType = "application/octet-stream"
	}
	if len(in.MediaType) > 127 || !mediaTypeRE.MatchString(in.MediaType) {
		bad("media_type", "want a media type like application/octet-stream")
	}
	if in.Digest != "" && !digestRE.MatchString(in.Digest) {
		bad("digest", "want sha256:<64 lowercase hex>")
	}
	if len(fe) > 0 {
		return errdefs.Validation(fe)
	}
	return nil
}

// Upload stores one artifact of a draft release (creating the draft),
// replacing an artifact of the same name. Platform admins only.
func (s *Service) Upload(ctx context.Context, g *iam.Grants, in UploadInput) (Artifact, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermReleasePublish, "platform_release"); err != nil {
		return Artifact{}, err
	}
	return s.upload(ctx, in)
}

func (s *Service) upload(ctx context.Context, in UploadInput) (Artifact, error) {
	if err := in.check(); err != nil {
		return Artifact{}, err
	}
	// Refuse early, before streaming, when the release is already frozen.
	if r, err := s.Store.Read().GetRelease(ctx, in.Version); err == nil && r.Published() {
		return Artifact{}, publishedConflict(in.Version)
	} else if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return Artifact{}, err
	}
	digest, size, err := s.Blobs.PutContent(ctx, in.Body, s.MaxArtifactBytes, in.Digest)
	if errors.Is(err, blobstore.ErrDigestMismatch) {
		return Artifact{}, errdefs.Invalid("digest_mismatch", "the uploaded content is not the %s the Digest header named (%v); upload the file again", in.Digest, err)
	}
	if err != nil {
		return Artifact{}, err
	}
	if size == 0 {
		return Artifact{}, errdefs.Invalid("empty_artifact", "the request body is empty; send the artifact's bytes")
	}
	now := s.Now().UTC()
	actor := principal.From(ctx).Key()
	a := Artifact{Version: in.Version, Name: in.Name, OS: in.OS, Arch: in.Arch, Kind: in.Kind, MediaType: in.MediaType,
		Digest: digest, Size: size, Location: "blobstore:" + digest, UploadedBy: actor, UploadedAt: now}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		// Locked: a publish of this version waits for the upload to commit
		// (and signs its artifact), or has committed first (and the upload
		// is refused); without the lock, on PostgreSQL, an upload that read
		// a draft could commit after the publish froze it.
		r, err := tx.LockRelease(ctx, in.Version)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			if err := tx.InsertRelease(ctx, Release{Version: in.Version, State: StateDraft, CreatedBy: actor, CreatedAt: now}); err != nil {
				if errors.Is(err, storage.ErrAlreadyExists) {
					return errdefs.Conflict("release_race", "release %s was created at the same moment; retry", in.Version)
				}
				return err
			}
		case err != nil:
			return err
		case r.Published():
			return publishedConflict(in.Version)
		}
		if err := tx.PutReleaseArtifact(ctx, a); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "platform.release.artifact.upload", ResourceType: "platform_release", ResourceID: in.Version}, nil, ViewArtifact(a))
	})
	return a, err
}

func publishedConflict(version string) error {
	return errdefs.Conflict("release_published", "release %s is published and immutable; upload to a new version", version)
}

// Publish builds, signs and freezes a draft release. Platform admins only.
func (s *Service) Publish(ctx context.Context, g *iam.Grants, version string) (Release, []Artifact, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermReleasePublish, "platform_release"); err != nil {
		return Release{}, nil, err
	}
	return s.publish(ctx, version)
}

func (s *Service) publish(ctx context.Context, version string) (Release, []Artifact, error) {
	if !ValidVersion(version) {
		return Release{}, nil, errdefs.Invalid("invalid_version", "version %q is not a semantic version like 1.2.3", version)
	}
	var rel Release
	var arts []Artifact
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		var err error
		if rel, err = tx.LockRelease(ctx, version); errors.Is(err, storage.ErrNotFound) {
			return errdefs.NotFound("release_not_found", "release %s has no uploaded artifacts; upload them first (gpuaas release publish DIR --version %s)", version, version)
		} else if err != nil {
			return err
		}
		if rel.Published() {
			return publishedConflict(version)
		}
		if arts, err = tx.ListReleaseArtifacts(ctx, version); err != nil {
			return err
		}
		if len(arts) == 0 {
			return errdefs.FailedPrecondition("release_empty", "release %s has no artifacts; upload at least one", version)
		}
		rel.PublishedAt = s.Now().UTC().Truncate(time.Second)
		rel.PublishedBy = principal.From(ctx).Key()
		m := Manifest{Schema: ManifestSchema, Version: version, PublishedAt: rel.PublishedAt}
		for _, a := range arts {
			m.Artifacts = append(m.Artifacts, Entry(a))
		}
		if rel.Manifest, err = json.MarshalIndent(m, "", "  "); err != nil {
			return err
		}
		rel.Manifest = append(rel.Manifest, '\n')
		if rel.Signature, err = s.Key.Sign(rel.Manifest); err != nil {
			return err
		}
		rel.SigningKID, rel.State = s.Key.KID, StatePublished
		if err := tx.PublishRelease(ctx, rel); err != nil {
			if errors.Is(err, storage.ErrConflict) {
				return publishedConflict(version)
			}
			return err
		}
		if err := tx.Emit(storage.Event{Type: EventPublished, Subject: "platform-releases/" + version}, m); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "platform.release.publish", ResourceType: "platform_release", ResourceID: version},
			nil, map[string]any{"version": version, "artifacts": len(arts), "signing_kid": rel.SigningKID})
	})
	return rel, arts, err
}

// List returns published releases, newest first.
func (s *Service) List(ctx context.Context, limit int) ([]Release, error) {
	if limit <= 0 || limit > 500 {
		limit = 500
	}
	return s.Store.Read().ListPublishedReleases(ctx, limit)
}

// Get returns a published release and its artifacts.
func (s *Service) Get(ctx context.Context, version string) (Release, []Artifact, error) {
	r, err := s.Store.Read().GetRelease(ctx, version)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && !r.Published()) {
		return Release{}, nil, errdefs.NotFound("release_not_found", "no published release %q; list them with gpuaas release list", version)
	}
	if err != nil {
		return Release{}, nil, err
	}
	rows, err := s.Store.Read().ListReleaseArtifacts(ctx, version)
	if err != nil {
		return Release{}, nil, err
	}
	arts, err := signedArtifacts(r, rows)
	return r, arts, err
}

// signedArtifacts is what a published release serves: the entries of its
// signed manifest, whatever the artifact rows say now. They can differ: on
// PostgreSQL an upload that read the release as a draft commits its row
// after the publish that froze it, and its bytes are in no signature. Blobs
// are content-addressed and never replaced, so the manifest's digest still
// names the bytes that were signed.
func signedArtifacts(r Release, rows []Artifact) ([]Artifact, error) {
	var m Manifest
	if err := json.Unmarshal(r.Manifest, &m); err != nil {
		return nil, fmt.Errorf("release %s: signed manifest: %w", r.Version, err)
	}
	byName := make(map[string]Artifact, len(rows))
	for _, a := range rows {
		byName[a.Name] = a
	}
	arts := make([]Artifact, 0, len(m.Artifacts))
	for _, e := range m.Artifacts {
		a, ok := byName[e.Name]
		if !ok || Entry(a) != e {
			a = Artifact{Version: r.Version, Name: e.Name, OS: e.OS, Arch: e.Arch, Kind: e.Kind, MediaType: e.MediaType,
				Digest: e.Digest, Size: e.Size, Location: "blobstore:" + e.Digest}
		}
		arts = append(arts, a)
	}
	return arts, nil
}

// Open streams one artifact of a published release, as its signed manifest
// names it; the caller closes it.
func (s *Service) Open(ctx context.Context, version, name string) (Artifact, io.ReadSeekCloser, error) {
	_, arts, err := s.Get(ctx, version)
	if err != nil {
		return Artifact{}, nil, err
	}
	i := slices.IndexFunc(arts, func(a Artifact) bool { return a.Name == name })
	if i < 0 {
		return Artifact{}, nil, errdefs.NotFound("release_artifact_not_found", "release %s has no artifact %q; see gpuaas release get %s", version, name, version)
	}
	a := arts[i]
	rc, size, err := s.Blobs.OpenContent(ctx, strings.TrimPrefix(a.Location, "blobstore:"))
	if err != nil {
		return Artifact{}, nil, err
	}
	if size != a.Size {
		rc.Close()
		return Artifact{}, nil, errors.New("release artifact " + version + "/" + name + ": stored bytes are damaged")
	}
	return a, rc, nil
}

// PublicKeyPEM is the release signing key's public half.
func (s *Service) PublicKeyPEM() []byte { return s.Key.PublicPEM() }

// ArtifactView is an artifact as audit rows record it: its manifest entry
// and its release.
type ArtifactView struct {
	Version string `json:"version"`
	ManifestArtifact
}

// ViewArtifact is the audit view of an artifact.
func ViewArtifact(a Artifact) ArtifactView {
	return ArtifactView{Version: a.Version, ManifestArtifact: Entry(a)}
}

// Entry is an artifact's manifest entry.
func Entry(a Artifact) ManifestArtifact {
	return ManifestArtifact{Name: a.Name, OS: a.OS, Arch: a.Arch, Kind: a.Kind, MediaType: a.MediaType, Digest: a.Digest, Size: a.Size}
}
