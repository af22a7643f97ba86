package serviceaccounts

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// AccountStatus says whether a service account's keys may mint tokens and
// its tokens still work.
type AccountStatus string

const (
	AccountActive   AccountStatus = "active"
	AccountDisabled AccountStatus = "disabled"
)

// ServiceAccount is a machine identity pinned to one project.
type ServiceAccount struct {
	ID          string        `json:"id"`
	OrgID       string        `json:"org_id"`
	ProjectID   string        `json:"project_id,omitempty"`
	Slug        string        `json:"slug"`
	Name        string        `json:"name"`
	Description string        `json:"description,omitempty"`
	Status      AccountStatus `json:"status"`
	// TokensValidAfter invalidates every token minted before it: disabling
	// moves it forward, so enabling again does not revive old tokens.
	TokensValidAfter time.Time `json:"tokens_valid_after,omitzero"`
	CreatedAt        time.Time `json:"created_at,omitzero"`
	UpdatedAt        time.Time `json:"updated_at,omitzero"`
}

// ServiceAccountKey is the public half of a service-account key pair. It
// has no state of its own: ExpiresAt (zero: valid until rotated out) says
// until when it may sign.
type ServiceAccountKey struct {
	ID               string    `json:"id"` // the key_id, sent as the assertion's kid
	ServiceAccountID string    `json:"service_account_id"`
	Algorithm        string    `json:"algorithm"`  // EdDSA | ES256
	PublicKey        string    `json:"public_key"` // PKIX PEM
	CreatedAt        time.Time `json:"created_at,omitzero"`
	ExpiresAt        time.Time `json:"expires_at,omitzero"` // zero: valid until rotated out
}

// ActiveAt reports whether the key may sign assertions at t.
func (k ServiceAccountKey) ActiveAt(t time.Time) bool {
	return k.ExpiresAt.IsZero() || t.Before(k.ExpiresAt)
}

// Queries is what the service-account domain reads and writes.
type Queries interface {
	CreateServiceAccount(ctx context.Context, a ServiceAccount) error
	GetServiceAccount(ctx context.Context, id string) (ServiceAccount, error)
	// LockServiceAccount is GetServiceAccount holding the row until the
	// mutation ends: changes of one account (status, keys) run one after
	// the other, each reading what the one before committed.
	LockServiceAccount(ctx context.Context, id string) (ServiceAccount, error)
	ListServiceAccounts(ctx context.Context, projectID string, p storage.Page) ([]ServiceAccount, string, error)
	SetServiceAccountStatus(ctx context.Context, id string, status AccountStatus, validAfter, at time.Time) error
	DeleteServiceAccount(ctx context.Context, id string) error

	CreateServiceAccountKey(ctx context.Context, k ServiceAccountKey) error
	GetServiceAccountKey(ctx context.Context, id string) (ServiceAccountKey, error)
	KeysOfServiceAccounts(ctx context.Context, ids []string) ([]ServiceAccountKey, error)
	ExpireServiceAccountKeys(ctx context.Context, accountID string, at time.Time) (int64, error)
	// ExpireServiceAccountKey makes one key expire at at, unless it expires
	// earlier.
	ExpireServiceAccountKey(ctx context.Context, accountID, keyID string, at time.Time) error
	ServiceAccountWithKey(ctx context.Context, accountID, keyID string) (ServiceAccount, ServiceAccountKey, error)

	UseAssertionID(ctx context.Context, accountID, jti string, expiresAt time.Time) error
	PurgeExpiredAssertionIDs(ctx context.Context, now time.Time) (int64, error)

	// The account's role bindings (IAM's table): granted by iam.Bind in
	// this domain's mutation, read and removed with the account.
	iam.Binder
	ServiceAccountRoles(ctx context.Context, ids []string) (map[string][]string, error)
	DeleteBindingsOfPrincipal(ctx context.Context, principalType, principalID string) error
}

// Tx is a mutation as the service-account domain sees it.
type Tx interface {
	storage.Tx
	Queries
}

// Store is the service-account domain's storage.
type Store = storage.Store[Tx, Queries]
