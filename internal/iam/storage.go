package iam

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// Org is a tenant.
type Org struct {
	ID        string    `json:"id"`
	Slug      string    `json:"slug"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// Project belongs to one org; its slug is unique within the org.
type Project struct {
	ID          string    `json:"id"`
	OrgID       string    `json:"org_id"`
	Slug        string    `json:"slug"`
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"created_at,omitzero"`
}

// UserStatus says whether a person may sign in.
type UserStatus string

const (
	UserActive   UserStatus = "active"
	UserDisabled UserStatus = "disabled"
)

// User is a person who signs in with a password.
type User struct {
	ID           string
	Email        string
	DisplayName  string
	PasswordHash string
	Status       UserStatus
	// TokensValidAfter invalidates every access token issued before it:
	// disabling a user or resetting a password moves it forward.
	TokensValidAfter time.Time
	CreatedAt        time.Time
}

// RoleBinding grants one role to one principal at one scope.
type RoleBinding struct {
	ID            string    `json:"id"`
	PrincipalType string    `json:"principal_type"`
	PrincipalID   string    `json:"principal_id"`
	Role          string    `json:"role"`
	ScopeType     string    `json:"scope_type"` // platform | org | project
	ScopeID       string    `json:"scope_id,omitempty"`
	OrgID         string    `json:"org_id,omitempty"`
	CreatedAt     time.Time `json:"created_at,omitzero"`
}

// SigningKey is a key the control plane signs tokens with. The private half
// is sealed (encrypted) before it reaches the database; replicas share keys
// through this table.
type SigningKey struct {
	KID        string
	Purpose    string // access_token | registry_token | ...
	Algorithm  string
	PrivateKey string // sealed
	PublicKey  string // PEM
	CreatedAt  time.Time
	RetiredAt  time.Time
}

// Queries is what the IAM domain reads and writes.
type Queries interface {
	CreateOrg(ctx context.Context, o Org) error
	GetOrg(ctx context.Context, id string) (Org, error)
	ListOrgs(ctx context.Context, onlyIDs []string, p storage.Page) ([]Org, string, error)
	CreateProject(ctx context.Context, p Project) error
	GetProject(ctx context.Context, id string) (Project, error)
	ListProjects(ctx context.Context, orgID string, onlyIDs []string, p storage.Page) ([]Project, string, error)

	CreateUser(ctx context.Context, u User) error
	GetUser(ctx context.Context, id string) (User, error)
	GetUserByEmail(ctx context.Context, email string) (User, error)
	SetUserStatus(ctx context.Context, id string, status UserStatus, cutTokens time.Time) error
	SetUserPassword(ctx context.Context, id, hash string, at time.Time) error

	Binder
	GrantReader
	GetRoleBinding(ctx context.Context, id string) (RoleBinding, error)
	DeleteRoleBinding(ctx context.Context, id string) error
	BindingsAtScope(ctx context.Context, scopeType, scopeID string, p storage.Page) ([]RoleBinding, string, error)

	KeyStore
	LoginFailureStore
}

// LoginFailureStore counts sign-in attempts per account for every replica
// of the database (loginthrottle.go). An account is the keyed hash of a
// normalised email, never the email.
type LoginFailureStore interface {
	// CountLoginAttempt counts an attempt on account at at as a failure,
	// before its password is checked, unless the account is in its
	// back-off at at: LoginFreeFailures or more failures, not lapsed, the
	// last less than LoginBackoff(count) before at. Check and count are one
	// statement, so attempts made at once on any number of replicas get
	// exactly the budget left. It returns the new count and true, or false
	// when the attempt is refused (nothing is written then). The count
	// starts again at 1 when the earlier failures had lapsed: at is past
	// the last of n of them by more than LoginFailuresLapse(n). The last
	// failure's time never moves back (a replica whose clock is behind
	// cannot shorten a back-off).
	CountLoginAttempt(ctx context.Context, account string, at time.Time) (int, bool, error)
	// LoginFailures returns the failures counted for account and the time
	// of the last one: 0 and the zero time when none are. Lapsed failures
	// are returned as they are; the caller judges them (LoginFailuresLapse).
	LoginFailures(ctx context.Context, account string) (int, time.Time, error)
	// ClearLoginFailures forgets account's failures (a success).
	ClearLoginFailures(ctx context.Context, account string) error
	// PruneLoginFailures deletes at most limit accounts whose last failure
	// is before before, oldest first, and returns how many it deleted; an
	// account whose row a concurrent attempt made live again is kept.
	PruneLoginFailures(ctx context.Context, before time.Time, limit int) (int64, error)
}

// KeyStore holds the signing keys a Keyring loads and rotates.
type KeyStore interface {
	InsertSigningKey(ctx context.Context, k SigningKey) error
	SigningKeys(ctx context.Context, purpose string) ([]SigningKey, error)
	// InsertFirstSigningKey stores k unless its purpose has an unretired
	// key already, deciding once for every replica of the database, and
	// reports whether it did.
	InsertFirstSigningKey(ctx context.Context, k SigningKey) (bool, error)
}

// Binder writes a role binding: what Bind needs of the caller's
// transaction, so another domain grants roles by IAM's rules in its own
// mutation.
type Binder interface {
	CreateRoleBinding(ctx context.Context, b RoleBinding) error
}

// GrantReader reads a principal's role bindings: what LoadGrants needs.
type GrantReader interface {
	BindingsOfPrincipal(ctx context.Context, principalType, principalID string) ([]RoleBinding, error)
}

// Tx is a mutation as the IAM domain sees it.
type Tx interface {
	storage.Tx
	Queries
}

// Store is the IAM domain's storage.
type Store = storage.Store[Tx, Queries]
