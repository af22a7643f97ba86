package releases

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// State is a release's lifecycle state.
type State string

const (
	// StateDraft: artifacts are being uploaded; invisible to readers.
	StateDraft State = "draft"
	// StatePublished: the manifest is signed and the release is immutable.
	StatePublished State = "published"
)

// Kind is what an artifact is for.
type Kind string

// Artifact kinds.
const (
	KindCLI      Kind = "cli"
	KindAgent    Kind = "agent"
	KindSDK      Kind = "sdk"
	KindTemplate Kind = "template"
)

// Release is one version of the platform's own deliverables.
type Release struct {
	Version     string
	State       State
	Manifest    []byte // the exact signed bytes (published only)
	Signature   string // base64 DER ECDSA-SHA256 over Manifest
	SigningKID  string
	CreatedBy   string
	CreatedAt   time.Time
	PublishedBy string
	PublishedAt time.Time
}

// Published reports whether the release is frozen and readable.
func (r Release) Published() bool { return r.State == StatePublished }

// Artifact is one file of a release.
type Artifact struct {
	Version    string
	Name       string
	OS         string
	Arch       string
	Kind       Kind
	MediaType  string
	Digest     string // sha256:<hex>
	Size       int64
	Location   string // where the bytes are: blobstore:sha256:<hex>
	UploadedBy string
	UploadedAt time.Time
}

// Queries is what the releases domain reads and writes.
type Queries interface {
	// GetRelease reads one release; ErrNotFound if none.
	GetRelease(ctx context.Context, version string) (Release, error)
	// LockRelease reads one release and, inside a mutation, holds it
	// until the mutation ends (on SQLite every mutation already holds the
	// database), so an upload and a publish of one version take turns;
	// ErrNotFound if none.
	LockRelease(ctx context.Context, version string) (Release, error)
	// ListPublishedReleases lists published releases, newest first.
	ListPublishedReleases(ctx context.Context, limit int) ([]Release, error)
	// InsertRelease creates a draft; ErrAlreadyExists if the version exists.
	InsertRelease(ctx context.Context, r Release) error
	// PublishRelease stores the signed manifest and freezes a draft;
	// ErrConflict if it is no longer a draft.
	PublishRelease(ctx context.Context, r Release) error
	// PutReleaseArtifact inserts or replaces an artifact of a draft.
	PutReleaseArtifact(ctx context.Context, a Artifact) error
	// ListReleaseArtifacts lists a release's artifacts by name.
	ListReleaseArtifacts(ctx context.Context, version string) ([]Artifact, error)
}

// Tx is a releases mutation.
type Tx interface {
	storage.Tx
	Queries
}

// Store is the releases domain's storage.
type Store = storage.Store[Tx, Queries]
