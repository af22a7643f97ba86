package serviceaccounts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// CreateInput describes a new service account and its first key.
type CreateInput struct {
	Name        string   `json:"name"`
	Slug        string   `json:"slug"`
	Description string   `json:"description"`
	Roles       []string `json:"roles"`
	// KeyAlgorithm of a server-generated key: EdDSA (default) or ES256.
	KeyAlgorithm string `json:"key_algorithm"`
	// PublicKeyPEM, when set, is the caller's own public key: the server
	// then generates nothing and returns no private key.
	PublicKeyPEM string `json:"public_key_pem"`
}

// RotateInput adds a key and retires the others after a grace period.
type RotateInput struct {
	// GracePeriodSeconds keeps the current keys valid this long; 0 (the
	// default) revokes them now.
	GracePeriodSeconds int    `json:"grace_period_seconds"`
	KeyAlgorithm       string `json:"key_algorithm"`
	PublicKeyPEM       string `json:"public_key_pem"`
}

// Account is a service account with its roles and keys (public halves only).
type Account struct {
	ServiceAccount
	Roles []string            `json:"roles"`
	Keys  []ServiceAccountKey `json:"keys"`
}

// IssuedKey is the answer of create and rotate: the account, the new key
// and, when the server generated it, the private key — shown this once.
type IssuedKey struct {
	Account       Account
	Key           ServiceAccountKey
	PrivateKeyPEM string
	TokenURL      string
}

const maxNameLen, maxDescriptionLen, maxRoles = 200, 2000, 10

func errAccountNotFound(id string) error {
	return errdefs.NotFound("service_account_not_found", "service account %q does not exist in this project", id)
}

// Create makes a service account with its role bindings and first key.
func (s *Service) Create(ctx context.Context, g *iam.Grants, projectID string, in CreateInput) (IssuedKey, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermSAWrite)
	if err != nil {
		return IssuedKey{}, err
	}
	in.Name, in.Slug = strings.TrimSpace(in.Name), strings.TrimSpace(in.Slug)
	var fe []errdefs.FieldError
	if in.Name == "" || len(in.Name) > maxNameLen {
		fe = append(fe, errdefs.FieldError{Field: "/name", Code: "required", Message: fmt.Sprintf("is required, at most %d characters", maxNameLen)})
	}
	if !iam.ValidSlug(in.Slug) {
		fe = append(fe, errdefs.FieldError{Field: "/slug", Code: "invalid_slug", Message: "must be 2-63 lowercase letters, digits and dashes, starting with a letter"})
	}
	if len(in.Description) > maxDescriptionLen {
		fe = append(fe, errdefs.FieldError{Field: "/description", Code: "too_long", Message: fmt.Sprintf("is at most %d characters", maxDescriptionLen)})
	}
	roles, rfe := normalizeRoles(in.Roles)
	fe = append(fe, rfe...)
	if fe != nil {
		return IssuedKey{}, errdefs.Validation(fe)
	}
	if err := s.checkGrantable(ctx, g, p, roles, "service_account.create", ""); err != nil {
		return IssuedKey{}, err
	}
	now := s.Now()
	key, priv, err := s.newKey(in.KeyAlgorithm, in.PublicKeyPEM, now)
	if err != nil {
		return IssuedKey{}, err
	}
	a := ServiceAccount{ID: iam.NewID(), OrgID: p.OrgID, ProjectID: p.ID, Slug: in.Slug, Name: in.Name,
		// No cut-off yet: the zero time, so a token minted in the account's
		// first millisecond is valid.
		Description: in.Description, Status: AccountActive, CreatedAt: now, UpdatedAt: now}
	key.ServiceAccountID = a.ID
	out := Account{ServiceAccount: a, Roles: roles, Keys: []ServiceAccountKey{key}}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.CreateServiceAccount(ctx, a); err != nil {
			if errors.Is(err, storage.ErrAlreadyExists) {
				return errdefs.AlreadyExists("service_account_exists", "a service account with slug %q already exists in this project; pick another slug", a.Slug)
			}
			return err
		}
		if err := tx.CreateServiceAccountKey(ctx, key); err != nil {
			return err
		}
		for _, r := range roles {
			if _, err := iam.Bind(ctx, tx, now, principal.ServiceAccount, a.ID, r, iam.ScopeProject, p.ID, p.OrgID); err != nil {
				return err
			}
		}
		if err := emit(tx, "service_account.create", a, string(a.Status)); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "service_account.create", ResourceType: "service_account", ResourceID: a.ID,
			OrgID: a.OrgID, ProjectID: a.ProjectID}, nil, out)
	})
	if err != nil {
		return IssuedKey{}, err
	}
	s.Logger.InfoContext(ctx, "service account created", "service_account_id", a.ID, "key_id", key.ID, "project_id", p.ID)
	return IssuedKey{Account: out, Key: key, PrivateKeyPEM: priv, TokenURL: s.TokenURL()}, nil
}

// normalizeRoles defaults, deduplicates and checks the roles of an account:
// known roles that can be bound at project scope.
func normalizeRoles(in []string) ([]string, []errdefs.FieldError) {
	if len(in) == 0 {
		return []string{DefaultRole}, nil
	}
	if len(in) > maxRoles {
		return nil, []errdefs.FieldError{{Field: "/roles", Code: "too_many", Message: fmt.Sprintf("at most %d roles", maxRoles)}}
	}
	var (
		out  []string
		fe   []errdefs.FieldError
		seen = map[string]bool{}
	)
	for i, r := range in {
		switch {
		case !iam.KnownRole(r):
			fe = append(fe, errdefs.FieldError{Field: fmt.Sprintf("/roles/%d", i), Code: "unknown_role",
				Message: "unknown role; use a project role: project_admin, project_member, project_viewer or app_operator"})
		case !iam.RoleBindableAt(r, iam.ScopeProject):
			fe = append(fe, errdefs.FieldError{Field: fmt.Sprintf("/roles/%d", i), Code: "role_not_bindable_here",
				Message: "role " + r + " cannot be granted at project scope; a service account holds project roles only"})
		case !seen[r]:
			seen[r] = true
			out = append(out, r)
		}
	}
	return out, fe
}

// checkGrantable refuses to hand a service account (or its new key) any
// permission the caller does not itself hold at the project: a service
// account is never a way to escalate privileges.
func (s *Service) checkGrantable(ctx context.Context, g *iam.Grants, p iam.Project, roles []string, action, resourceID string) error {
	sc := iam.Scope{OrgID: p.OrgID, ProjectID: p.ID}
	permsOf := *s.permsOf.Load()
	for _, r := range roles {
		for _, perm := range permsOf(r) {
			if g.Can(perm, sc) {
				continue
			}
			if err := s.Store.RecordOutcome(ctx, storage.AuditEvent{Action: action, ResourceType: "service_account", ResourceID: resourceID,
				OrgID: p.OrgID, ProjectID: p.ID, Reason: "role " + r + " carries " + perm + ", which the caller lacks"}, "denied"); err != nil {
				s.Logger.ErrorContext(ctx, "could not audit a denied attempt", "err", err)
			}
			return errdefs.PermissionDenied("role_escalation",
				"you cannot give a service account role %q: it carries the %q permission, which you do not hold in this project; ask a project admin", r, perm)
		}
	}
	return nil
}

// newKey builds a key row from a caller's public key or a generated pair.
func (s *Service) newKey(algorithm, publicKeyPEM string, now time.Time) (ServiceAccountKey, string, error) {
	var (
		alg, pub, priv string
		err            error
	)
	want, ok := normalizeAlg(algorithm)
	if !ok {
		return ServiceAccountKey{}, "", keyFieldErr("/key_algorithm", "unsupported_key_algorithm", "must be EdDSA (Ed25519, the default) or ES256 (ECDSA P-256)")
	}
	if publicKeyPEM != "" {
		if algorithm == "" {
			want = ""
		}
		alg, pub, err = parsePublicKeyPEM(publicKeyPEM, want)
	} else {
		alg = want
		pub, priv, err = generateKey(alg)
	}
	if err != nil {
		return ServiceAccountKey{}, "", err
	}
	return ServiceAccountKey{ID: iam.NewID(), Algorithm: alg, PublicKey: pub, CreatedAt: now}, priv, nil
}

// load reads an account of a project with its roles and keys; an account of
// another project is not found. Callers check the permission first.
func (s *Service) load(ctx context.Context, q Queries, projectID, id string) (Account, error) {
	a, err := q.GetServiceAccount(ctx, id)
	return s.ofProject(ctx, q, projectID, id, a, err)
}

// ofProject completes the read (a, err) of account id as an account of
// projectID: another project's is not found.
func (s *Service) ofProject(ctx context.Context, q Queries, projectID, id string, a ServiceAccount, err error) (Account, error) {
	if errors.Is(err, storage.ErrNotFound) || (err == nil && a.ProjectID != projectID) {
		return Account{}, errAccountNotFound(id)
	}
	if err != nil {
		return Account{}, err
	}
	accs, err := s.complete(ctx, q, []ServiceAccount{a})
	if err != nil {
		return Account{}, err
	}
	return accs[0], nil
}

// change loads an account of a project for a change by a person or a
// client: its row is held until the mutation ends, so concurrent changes
// of one account (a disable, rotations) each see what the one before
// committed; and an app instance's own identity is refused, which the
// platform alone keys and removes.
func (s *Service) change(ctx context.Context, tx Tx, projectID, id string) (Account, error) {
	locked, err := tx.LockServiceAccount(ctx, id)
	a, err := s.ofProject(ctx, tx, projectID, id, locked, err)
	if err != nil {
		return Account{}, err
	}
	return a, managed(a)
}

// managed refuses a change of an app instance's own identity: without it
// the instance could not report its usage (billed to the project whose
// admin would have cut it) nor read its own instance.
func managed(a Account) error {
	if slices.Contains(a.Roles, iam.RoleInstanceWorkload) {
		return errdefs.FailedPrecondition("managed_by_platform",
			"service account %s is an app instance's own identity: the platform gives it a new key at each deployment and removes it when the instance is decommissioned, so it cannot be disabled, re-keyed or deleted here; decommission the instance instead", a.ID)
	}
	return nil
}

// complete attaches roles and keys to accounts, in two queries. Roles is
// never nil (the views and audit rows show an empty list).
func (s *Service) complete(ctx context.Context, q Queries, as []ServiceAccount) ([]Account, error) {
	ids := make([]string, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	roles, err := q.ServiceAccountRoles(ctx, ids)
	if err != nil {
		return nil, err
	}
	keys, err := q.KeysOfServiceAccounts(ctx, ids)
	if err != nil {
		return nil, err
	}
	byAcc := map[string][]ServiceAccountKey{}
	for _, k := range keys {
		byAcc[k.ServiceAccountID] = append(byAcc[k.ServiceAccountID], k)
	}
	out := make([]Account, len(as))
	for i, a := range as {
		out[i] = Account{ServiceAccount: a, Roles: roles[a.ID], Keys: byAcc[a.ID]}
		if out[i].Roles == nil {
			out[i].Roles = []string{}
		}
	}
	return out, nil
}

// List lists the service accounts of a project.
func (s *Service) List(ctx context.Context, g *iam.Grants, projectID string, pg storage.Page) ([]Account, string, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermSARead)
	if err != nil {
		return nil, "", err
	}
	q := s.Store.Read()
	as, next, err := q.ListServiceAccounts(ctx, p.ID, pg)
	if err != nil {
		return nil, "", err
	}
	out, err := s.complete(ctx, q, as)
	return out, next, err
}

// Get reads one service account.
func (s *Service) Get(ctx context.Context, g *iam.Grants, projectID, id string) (Account, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermSARead)
	if err != nil {
		return Account{}, err
	}
	return s.load(ctx, s.Store.Read(), p.ID, id)
}

// Disable stops the account: no new tokens, and tokens already minted fail
// on their next request.
func (s *Service) Disable(ctx context.Context, g *iam.Grants, projectID, id string) (Account, error) {
	return s.setStatus(ctx, g, projectID, id, AccountDisabled)
}

// Enable lets a disabled account exchange assertions again. Tokens minted
// before it was disabled stay dead.
func (s *Service) Enable(ctx context.Context, g *iam.Grants, projectID, id string) (Account, error) {
	return s.setStatus(ctx, g, projectID, id, AccountActive)
}

func (s *Service) setStatus(ctx context.Context, g *iam.Grants, projectID, id string, status AccountStatus) (Account, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermSAWrite)
	if err != nil {
		return Account{}, err
	}
	action := map[AccountStatus]string{AccountDisabled: "service_account.disable", AccountActive: "service_account.enable"}[status]
	var after Account
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		before, err := s.change(ctx, tx, p.ID, id)
		if err != nil {
			return err
		}
		now := s.Now()
		// Disabling ends every live token; enabling revives none of them,
		// and cuts again: an exchange that checked the account just before
		// the disable committed mints its token just after, past the first
		// cut. Enabling an enabled account changes nothing.
		var cut time.Time
		if status == AccountDisabled || before.Status != status {
			cut = now
		}
		if err := tx.SetServiceAccountStatus(ctx, id, status, cut, now); err != nil {
			return err
		}
		after = before
		after.Status, after.UpdatedAt = status, now
		if !cut.IsZero() {
			after.TokensValidAfter = cut
		}
		if err := emit(tx, action, after.ServiceAccount, string(status)); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: action, ResourceType: "service_account", ResourceID: id,
			OrgID: p.OrgID, ProjectID: p.ID}, before.ServiceAccount, after.ServiceAccount)
	})
	if err == nil && status == AccountDisabled {
		s.IAM.AccessChanged()
	}
	return after, err
}

// RotateKey adds a new key; the account's other keys stay valid for the
// grace period (0: revoked now). At most MaxActiveKeys keys are valid at once.
func (s *Service) RotateKey(ctx context.Context, g *iam.Grants, projectID, id string, in RotateInput) (IssuedKey, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermSAWrite)
	if err != nil {
		return IssuedKey{}, err
	}
	grace := time.Duration(in.GracePeriodSeconds) * time.Second
	if in.GracePeriodSeconds < 0 || grace > MaxGracePeriod {
		return IssuedKey{}, keyFieldErr("/grace_period_seconds", "out_of_range",
			fmt.Sprintf("must be from 0 (revoke the current keys now) to %d (7 days)", int(MaxGracePeriod.Seconds())))
	}
	cur, err := s.load(ctx, s.Store.Read(), p.ID, id)
	if err == nil {
		err = managed(cur)
	}
	if err != nil {
		return IssuedKey{}, err
	}
	// A new key is the account's full power in the caller's hands.
	if err := s.checkGrantable(ctx, g, p, cur.Roles, "service_account.rotate_key", id); err != nil {
		return IssuedKey{}, err
	}
	now := s.Now()
	key, priv, err := s.newKey(in.KeyAlgorithm, in.PublicKeyPEM, now)
	if err != nil {
		return IssuedKey{}, err
	}
	key.ServiceAccountID = id
	var out Account
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		before, err := s.change(ctx, tx, p.ID, id)
		if err != nil {
			return err
		}
		// Keys valid now stay valid through a grace period, beside the new
		// one. Counted under the account's lock: rotations at once each
		// count the keys the one before left.

		retireAt, active := now.Add(grace), 0
		for _, k := range before.Keys {
			if grace > 0 && k.ActiveAt(now) {
				active++
			}
		}
		if active+1 > MaxActiveKeys {
			return errdefs.FailedPrecondition("too_many_active_keys",
				"service account %s already has %d keys that would still be valid; at most %d may be valid at once: rotate with grace_period_seconds=0, or wait for a rotated-out key to expire", id, active, MaxActiveKeys)
		}
		if _, err := tx.ExpireServiceAccountKeys(ctx, id, retireAt); err != nil {
			return err
		}
		if err := tx.CreateServiceAccountKey(ctx, key); err != nil {
			return err
		}
		// A rotation changes the keys, never the account row: writing back
		// the status read above would undo a disable that committed since
		// (on PostgreSQL the write waits for the disable's lock, then
		// overwrites it), re-enabling the account with this new key.
		out = before
		out.Keys = nil
		for _, k := range before.Keys {
			if k.ExpiresAt.IsZero() || k.ExpiresAt.After(retireAt) {
				k.ExpiresAt = retireAt
			}
			out.Keys = append(out.Keys, k)
		}
		out.Keys = append(out.Keys, key)
		if err := emit(tx, "service_account.rotate_key", out.ServiceAccount, string(out.Status)); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "service_account.rotate_key", ResourceType: "service_account", ResourceID: id,
			OrgID: p.OrgID, ProjectID: p.ID, Reason: fmt.Sprintf("grace_period_seconds=%d", in.GracePeriodSeconds)}, before, out)
	})
	if err != nil {
		return IssuedKey{}, err
	}
	if grace == 0 {
		// The other keys were revoked now, and with them the tokens
		// minted with them: open event streams re-check their reader at
		// once, as after a disable.
		s.IAM.AccessChanged()
	}
	s.Logger.InfoContext(ctx, "service account key rotated", "service_account_id", id, "key_id", key.ID, "grace", grace.String())
	return IssuedKey{Account: out, Key: key, PrivateKeyPEM: priv, TokenURL: s.TokenURL()}, nil
}

// Delete removes the account, its keys and its role bindings; its tokens
// fail on their next request.
func (s *Service) Delete(ctx context.Context, g *iam.Grants, projectID, id string) error {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermSAWrite)
	if err != nil {
		return err
	}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		before, err := s.change(ctx, tx, p.ID, id)
		if err != nil {
			return err
		}
		if err := tx.DeleteBindingsOfPrincipal(ctx, string(principal.ServiceAccount), id); err != nil {
			return err
		}
		if err := tx.DeleteServiceAccount(ctx, id); err != nil {
			return err
		}
		if err := emit(tx, "service_account.delete", before.ServiceAccount, "deleted"); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "service_account.delete", ResourceType: "service_account", ResourceID: id,
			OrgID: p.OrgID, ProjectID: p.ID}, before, nil)
	})
	if err == nil {
		s.IAM.AccessChanged()
	}
	return err
}
