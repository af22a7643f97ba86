package artifacts

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// ArtifactSigningKey is a project's registered signature verification key.
type ArtifactSigningKey struct {
	ID          string
	OrgID       string
	ProjectID   string
	Name        string
	Algorithm   string // ecdsa-p256 | ed25519 | rsa
	PublicKey   string // PKIX PEM
	Fingerprint string // sha256:<hex> of the DER
	CreatedBy   string
	CreatedAt   time.Time
}

// ArtifactIntent is a publish or pull intent.
type ArtifactIntent struct {
	ID                 string
	Kind               string // publish | pull
	OrgID              string
	ProjectID          string
	ArtifactKind       string // oci | blob
	SourceType         string // oci_registry | artifact_store
	AppSlug            string
	AppVersion         string
	ArtifactName       string
	Channel            string
	Repository         string
	TagHint            string
	SourceURI          string
	UploadID           string
	ArtifactID         string
	SignatureRequired  bool
	SignatureScheme    string
	SigningKeyID       string
	ProvenanceRequired bool
	CreatedBy          string
	// The access token of the request that created the intent, as the REST
	// API checks it on every request (iam.AccessClaims): its issue time in
	// microseconds and, for a service account, the key it was minted with.
	// Zero for intents created before they were recorded and for node pull
	// intents (no token): those are checked by their creator alone.
	CreatorTokenIssuedUS int64
	CreatorKeyID         string
	CreatedAt            time.Time
	ExpiresAt            time.Time
}

// RegistryCredential is a registry username whose secret is stored hashed,
// bound to one repository, a set of actions and an expiry.
type RegistryCredential struct {
	ID         string // the registry username
	IntentID   string
	ProjectID  string
	ArtifactID string // pull credentials: the artifact they pull
	Repository string
	Actions    string // comma-separated: pull | push,pull | push,pull,delete
	SecretHash string // sha256 hex of the secret
	CreatedAt  time.Time
	ExpiresAt  time.Time
}

// CredentialWrap is a sealed secret behind a single-use wrapping token.
type CredentialWrap struct {
	TokenHash string
	Sealed    string
	CreatedAt time.Time
	ExpiresAt time.Time
	UsedAt    time.Time
}

// AppArtifact is a registered, digest-pinned artifact of a project.
type AppArtifact struct {
	ID                 string
	OrgID              string
	ProjectID          string
	AppSlug            string
	AppVersion         string
	ArtifactName       string
	ArtifactKind       string
	SourceType         string
	Repository         string
	Digest             string
	Tag                string
	MediaType          string
	SizeBytes          int64
	SourceURI          string
	SourceMetadata     []byte // JSON object or nil
	PublishIntentID    string
	LifecycleState     LifecycleState
	TrustState         TrustState
	TrustReason        string
	TrustDetail        string
	VerifiedKeyID      string
	VerifiedAt         time.Time
	SignatureRequired  bool
	SignatureScheme    string
	SigningKeyID       string
	ProvenanceRequired bool
	RevokedAt          time.Time
	RevokeReason       string
	CreatedBy          string
	CreatedAt          time.Time
	UpdatedAt          time.Time
}

// Revoked reports whether the artifact was revoked (terminal, whatever its
// lifecycle and trust state say).
func (a AppArtifact) Revoked() bool { return !a.RevokedAt.IsZero() }

// Settled reports whether the platform is done with the artifact: revoked
// or retired, it is neither launched nor pulled again, so its manifest
// may be deleted from the registry. Other domains ask this instead of
// comparing states.
func (a AppArtifact) Settled() bool { return a.Revoked() || a.LifecycleState == StateRetired }

// Launchable reports whether new instances may run the artifact: it is
// active, verified and not revoked. Other domains ask this instead of
// comparing states.
func (a AppArtifact) Launchable() bool {
	return !a.Revoked() && a.LifecycleState == StateActive && a.TrustState == TrustVerified
}

// BlobUploadState is where the bytes of a blob upload stand in a
// project's quota.
type BlobUploadState string

// Blob upload states. A registered upload has no row: its artifact's
// size_bytes counts the content from then on.
const (
	// BlobUploading: in progress; Bytes is what it has reserved against the
	// quota (at least what it has received).
	BlobUploading BlobUploadState = "uploading"
	// BlobCommitted: committed and not registered; Bytes is its size.
	BlobCommitted BlobUploadState = "committed"
	// BlobSweeping: committed content the sweeper took, unregistered,
	// whose removal from the blob store has not succeeded yet; every pass
	// retries it until it does. A registration is refused as for
	// BlobSwept (the sweeper took the row first). Counts nothing.
	BlobSweeping BlobUploadState = "sweeping"
	// BlobSwept: committed content the sweeper removed unregistered; kept
	// so a late registration is refused instead of recording an artifact
	// whose bytes are gone, until no publish intent alive at the sweep can
	// still try (MaxIntentTTL). Counts nothing.
	BlobSwept BlobUploadState = "swept"
)

// BlobUpload is the quota's record of one blob upload's bytes that are not
// a registered artifact.
type BlobUpload struct {
	UploadID  string
	ProjectID string
	IntentID  string
	SourceURI string
	State     BlobUploadState
	Bytes     int64
	Digest    string // the expected digest once a commit starts
	CreatedAt time.Time
	UpdatedAt time.Time
}

// AppArtifactFilter narrows a project's artifact list; empty fields match
// everything.
type AppArtifactFilter struct {
	AppSlug, AppVersion, ArtifactName string
	LifecycleState                    LifecycleState
	TrustState                        TrustState
}

// OwnerAccount is what the registry's owner re-check reads of a service
// account (the serviceaccounts domain owns the rest of it).
type OwnerAccount struct {
	ID, OrgID, ProjectID string
	Status               serviceaccounts.AccountStatus
}

// OwnerReader reads the principal an intent was created by, as the
// registry re-checks it on every token request: what ownerMay needs.
type OwnerReader interface {
	iam.GrantReader
	GetUser(ctx context.Context, id string) (iam.User, error)
	// ArtifactOwnerAccount reads a service account; ErrNotFound if none.
	ArtifactOwnerAccount(ctx context.Context, id string) (OwnerAccount, error)
	// ArtifactOwnerNodeState reads a node's state; ErrNotFound if none.
	ArtifactOwnerNodeState(ctx context.Context, id string) (nodes.NodeState, error)
}

// VersionReader reads the unrevoked artifacts of an app version in any
// project: what the catalog's publish gate needs of the caller's
// transaction.
type VersionReader interface {
	LiveAppArtifactsOfVersion(ctx context.Context, appSlug, appVersion string) ([]AppArtifact, error)
}

// Queries is what the artifacts domain reads and writes.
type Queries interface {
	// GetOrg reads the org of an intent's project (its slug names the
	// repository); the org is IAM's.
	GetOrg(ctx context.Context, id string) (iam.Org, error)

	InsertArtifactSigningKey(ctx context.Context, k ArtifactSigningKey) error
	ListArtifactSigningKeys(ctx context.Context, projectID string, p storage.Page) ([]ArtifactSigningKey, string, error)
	AllArtifactSigningKeys(ctx context.Context, projectID string) ([]ArtifactSigningKey, error)

	InsertArtifactIntent(ctx context.Context, i ArtifactIntent) error
	GetArtifactIntent(ctx context.Context, projectID, id string) (ArtifactIntent, error)
	ArtifactIntentByUpload(ctx context.Context, projectID, uploadID string) (ArtifactIntent, error)
	LatestPublishIntent(ctx context.Context, projectID, appSlug, appVersion, artifactName, artifactKind string) (ArtifactIntent, error)

	InsertRegistryCredential(ctx context.Context, c RegistryCredential) error
	GetRegistryCredential(ctx context.Context, id string) (RegistryCredential, error)
	InsertCredentialWrap(ctx context.Context, w CredentialWrap) error
	ConsumeCredentialWrap(ctx context.Context, tokenHash string, now time.Time) (string, error)

	InsertAppArtifact(ctx context.Context, a AppArtifact) error
	GetAppArtifact(ctx context.Context, projectID, id string) (AppArtifact, error)
	UpdateAppArtifactState(ctx context.Context, a AppArtifact, prevState LifecycleState, prevTrust TrustState, prevRevoked bool) error
	ListAppArtifacts(ctx context.Context, projectID string, f AppArtifactFilter, p storage.Page) ([]AppArtifact, string, error)
	VersionReader

	// LockProjectBlobUsage holds the project's blob usage until the
	// transaction ends: every reservation against the quota takes it first,
	// so two replicas never both grant the last bytes.
	LockProjectBlobUsage(ctx context.Context, projectID string) error
	// ProjectBlobUsage is what counts against the project's blob quota:
	// registered blob artifacts (revoked and retired ones too: their bytes
	// stay), committed content no artifact references and the reservations
	// of uploads in progress, leaving out the upload exceptUploadID.
	ProjectBlobUsage(ctx context.Context, projectID, exceptUploadID string) (int64, error)
	// PutBlobUpload creates or updates an upload's row (its created_at is
	// kept).
	PutBlobUpload(ctx context.Context, u BlobUpload) error
	// ReserveBlobUpload creates the row of an upload in progress, or
	// updates its bytes, digest and updated_at only while it is still
	// BlobUploading: a row a commit, the sweeper or a registration moved on
	// is left alone. It reports whether it wrote.
	ReserveBlobUpload(ctx context.Context, u BlobUpload) (bool, error)
	// SetUploadingBlobBytes updates the bytes (and updated_at) of an
	// upload's row only while it is BlobUploading, and never creates one
	// (an aborted upload's row stays gone). It reports whether it wrote.
	SetUploadingBlobBytes(ctx context.Context, uploadID string, bytes int64, at time.Time) (bool, error)
	// DeleteSweptBlobUploads deletes the BlobSwept rows swept before
	// cutoff and says how many.
	DeleteSweptBlobUploads(ctx context.Context, cutoff time.Time) (int64, error)
	// GetBlobUpload reads an upload's row and holds it until the
	// transaction ends; ErrNotFound if none.
	GetBlobUpload(ctx context.Context, uploadID string) (BlobUpload, error)
	DeleteBlobUpload(ctx context.Context, uploadID string) error
	// ClaimCommittedBlob deletes the committed rows of the content at
	// sourceURI with digest (it is being registered) and says how many.
	ClaimCommittedBlob(ctx context.Context, projectID, sourceURI, digest string) (int64, error)
	// BlobContentSwept reports whether the content at sourceURI with
	// digest was taken by the sweeper unregistered (BlobSweeping or
	// BlobSwept).
	BlobContentSwept(ctx context.Context, projectID, sourceURI, digest string) (bool, error)
	// StaleBlobUploads lists up to limit rows in state whose updated_at is
	// before cutoff, oldest first.
	StaleBlobUploads(ctx context.Context, state BlobUploadState, cutoff time.Time, limit int) ([]BlobUpload, error)
	// BlobSourceRegistered reports whether a blob artifact of the project
	// references sourceURI.
	BlobSourceRegistered(ctx context.Context, projectID, sourceURI string) (bool, error)
	// BlobContentHeld reports whether content with digest is still needed
	// by anything but the upload exceptUploadID: a blob artifact of any
	// project, a platform release file (releases share the blob store's
	// content), or an upload in progress or committed (its digest is set
	// before its commit starts).
	BlobContentHeld(ctx context.Context, digest, exceptUploadID string) (bool, error)
	// OtherBlobUploadAt reports whether an upload other than uploadID,
	// in progress or committed, is for sourceURI with digest.
	OtherBlobUploadAt(ctx context.Context, sourceURI, digest, uploadID string) (bool, error)

	DigestRevoked(ctx context.Context, projectID, digest string) (bool, error)
	DigestRevocation(ctx context.Context, projectID, digest string) (time.Time, string, error)
	RepositoryDigestRevoked(ctx context.Context, repository, digest string) (bool, error)
	RepositoryDigestVerified(ctx context.Context, repository, digest string) (bool, error)
	// RepositoryArtifacts lists every artifact registered in repository,
	// revoked and retired ones too.
	RepositoryArtifacts(ctx context.Context, repository string) ([]AppArtifact, error)
	UnrevokedArtifactsWithDigest(ctx context.Context, projectID, digest string) ([]AppArtifact, error)
	RevokeArtifactsWithDigest(ctx context.Context, projectID, digest, reason string, at time.Time) error

	OwnerReader

	RegistryQuotaQueries
	StorageQuotaQueries
}

// RegistryBlob is a distinct blob digest committed into one of a
// project's registry repositories, counted against its registry quota.
type RegistryBlob struct {
	ProjectID  string
	Digest     string
	SizeBytes  int64
	Repository string // where it first came in
	CreatedAt  time.Time
	// UsedAt is when a push last committed the blob or a manifest put
	// referenced it: a recount keeps an unreferenced blob used within
	// RegistryHoldIdle, as a push may still be about to reference it.
	UsedAt time.Time
}

// RegistryHold is bytes held against a project's registry quota for a
// write the registry has not committed yet: an upload session (its ID is
// distribution's upload id) grows as its chunks stream in; a manifest or
// a mounted blob holds its whole size until the registry answers.
type RegistryHold struct {
	ID         string
	ProjectID  string
	Repository string
	SizeBytes  int64
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// RegistryQuotaQueries are the registry accounting's reads and writes.
type RegistryQuotaQueries interface {
	// RepositoryProject returns the project whose intents lead to
	// repository; ErrNotFound if none.
	RepositoryProject(ctx context.Context, repository string) (string, error)
	// LockRegistryQuota holds the project's quota until the transaction
	// ends, so its holds are counted one at a time.
	LockRegistryQuota(ctx context.Context, projectID string) error
	RegistryUsage(ctx context.Context, projectID string) (committed, held int64, err error)
	// RegistryBlobSize returns the size of a blob the project holds (ok
	// false if it holds none).
	RegistryBlobSize(ctx context.Context, projectID, digest string) (size int64, ok bool, err error)
	InsertRegistryBlob(ctx context.Context, b RegistryBlob) error
	TouchRegistryBlob(ctx context.Context, projectID, digest string, at time.Time) error
	// RegistryBlobs returns every blob the project holds.
	RegistryBlobs(ctx context.Context, projectID string) ([]RegistryBlob, error)
	DeleteRegistryBlob(ctx context.Context, projectID, digest string) error
	// RegistryRepositories returns every repository the project's intents
	// lead to or its blobs came in through.
	RegistryRepositories(ctx context.Context, projectID string) ([]string, error)
	// ScheduleRegistryRecount asks for a recount of the project's blobs
	// from at (or earlier, if asked for already); DueRegistryRecounts
	// returns the projects due by at; ClearRegistryRecount forgets a
	// project's recount due by through.
	ScheduleRegistryRecount(ctx context.Context, projectID string, at time.Time) error
	// RequestRegistryRecount asks for a recount due at, whatever was asked
	// before: a recount that started before at does not clear it.
	RequestRegistryRecount(ctx context.Context, projectID string, at time.Time) error
	DueRegistryRecounts(ctx context.Context, at time.Time, limit int) ([]string, error)
	ClearRegistryRecount(ctx context.Context, projectID string, through time.Time) error
	GetRegistryHold(ctx context.Context, id string) (RegistryHold, error)
	PutRegistryHold(ctx context.Context, h RegistryHold) error
	ShrinkRegistryHold(ctx context.Context, id string, n int64) error
	DeleteRegistryHold(ctx context.Context, id string) error
	// StaleRegistryHolds returns up to limit holds, of any project, last
	// written before before, oldest first.
	StaleRegistryHolds(ctx context.Context, before time.Time, limit int) ([]RegistryHold, error)
}

// Tx is a mutation as the artifacts domain sees it.
type Tx interface {
	storage.Tx
	Queries
}

// Store is the artifacts domain's storage.
type Store = storage.Store[Tx, Queries]
