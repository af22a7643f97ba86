package catalog

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// VersionStatus is where a version stands in its lifecycle:
// draft → published → deprecated → retired (transitions in lifecycle.go).
type VersionStatus string

// Version statuses: draft → published → deprecated → retired.
const (
	StatusDraft      VersionStatus = "draft"
	StatusPublished  VersionStatus = "published"
	StatusDeprecated VersionStatus = "deprecated"
	StatusRetired    VersionStatus = "retired"
)

// App is one catalog entry: the version-independent metadata of a manifest
// package. Metadata is the canonical JSON of the app section.
type App struct {
	ID             string
	Slug           string
	DisplayName    string
	Description    string
	Category       string
	RuntimeBackend string
	Metadata       []byte
	MetadataDigest string
	SubmittedBy    string
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// AppVersion is one registered version of an app. Manifest is the
// normalised version body; Digest identifies it (sha256 of its canonical
// JSON), so an identical re-submission can be told from a changed one.
type AppVersion struct {
	ID             string
	AppID          string
	AppSlug        string
	Version        string
	Status         VersionStatus
	RuntimeBackend string
	Manifest       []byte
	Digest         string
	SubmittedBy    string
	StatusReason   string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	PublishedAt    time.Time // zero until published
	DeprecatedAt   time.Time
	RetiredAt      time.Time
}

// AppEntitlement says whether a project (or, with ProjectID empty, a whole
// org) may use an app, and how it narrows what the app's manifest allows
// (PolicyOverrides, JSON).
type AppEntitlement struct {
	ID              string
	ProjectID       string
	OrgID           string
	AppID           string
	AppSlug         string
	Enabled         bool
	PolicyOverrides []byte
	UpdatedBy       string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// Queries is what the catalog domain reads and writes.
type Queries interface {
	CreateApp(ctx context.Context, a App) error
	UpdateAppMetadata(ctx context.Context, a App) error
	// ListApps lists apps; with withVersionIn non-empty, only those having
	// a version in one of those statuses.
	ListApps(ctx context.Context, withVersionIn []VersionStatus, p storage.Page) ([]App, string, error)

	CreateAppVersion(ctx context.Context, v AppVersion) error
	ReplaceDraftVersion(ctx context.Context, v AppVersion) error
	ListAppVersions(ctx context.Context, appSlug string, statuses []VersionStatus, p storage.Page) ([]AppVersion, string, error)
	SetAppVersionStatus(ctx context.Context, id string, from, to VersionStatus, reason string, at time.Time) error
	// LockAppVersion reads a version and holds it until the transaction
	// ends: a status change waits for the launches and version changes
	// that share it (instances' ShareAppVersion), and they for it.
	LockAppVersion(ctx context.Context, appSlug, version string) (AppVersion, error)

	CreateEntitlement(ctx context.Context, e AppEntitlement) error
	UpdateEntitlement(ctx context.Context, e AppEntitlement) error
	ListEntitlements(ctx context.Context, projectID string, onlyEnabled bool, p storage.Page) ([]AppEntitlement, string, error)
	CreateOrgEntitlement(ctx context.Context, e AppEntitlement) error
	UpdateOrgEntitlement(ctx context.Context, e AppEntitlement) error
	ListOrgEntitlements(ctx context.Context, orgID string, p storage.Page) ([]AppEntitlement, string, error)

	LaunchReader
}

// LaunchReader reads an app, a project's (or its org's) entitlement to it
// and one of its versions: what ResolveForProject needs of the caller's
// queries, so another domain resolves a launch inside its own transaction.
type LaunchReader interface {
	GetAppBySlug(ctx context.Context, slug string) (App, error)
	GetEntitlement(ctx context.Context, projectID, appSlug string) (AppEntitlement, error)
	GetOrgEntitlement(ctx context.Context, orgID, appSlug string) (AppEntitlement, error)
	GetAppVersion(ctx context.Context, appSlug, version string) (AppVersion, error)
}

// Tx is a mutation as the catalog domain sees it.
type Tx interface {
	storage.Tx
	Queries
}

// Store is the catalog domain's storage.
type Store = storage.Store[Tx, Queries]
