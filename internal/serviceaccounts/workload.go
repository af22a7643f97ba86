package serviceaccounts

import (
	"context"
	"errors"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Workload identities are service accounts the platform itself makes for
// something it runs (an app instance): created, re-keyed and deleted inside
// the caller's transaction (joined as this domain's Tx), whose audit row
// records them. No grants are checked — the platform acts, on behalf of a
// request that was authorised when it was accepted.

// ProvisionWorkload creates a project service account bound to the
// platform's instance_workload role (its own instance and its own usage,
// nothing else) with a fresh server-generated key, inside tx. The private
// key is returned once and never stored.
func (s *Service) ProvisionWorkload(ctx context.Context, outer storage.Tx, p iam.Project, slug, name string) (IssuedKey, error) {
	tx := s.Store.Join(outer)
	now := s.Now()
	key, priv, err := s.newKey("", "", now)
	if err != nil {
		return IssuedKey{}, err
	}
	a := ServiceAccount{ID: iam.NewID(), OrgID: p.OrgID, ProjectID: p.ID, Slug: slug, Name: name,
		Description: "workload identity managed by the platform", Status: AccountActive, CreatedAt: now, UpdatedAt: now}
	key.ServiceAccountID = a.ID
	if err := tx.CreateServiceAccount(ctx, a); err != nil {
		return IssuedKey{}, err
	}
	if err := tx.CreateServiceAccountKey(ctx, key); err != nil {
		return IssuedKey{}, err
	}
	if _, err := iam.BindWorkload(ctx, tx, now, a.ID, p.ID, p.OrgID); err != nil {
		return IssuedKey{}, err
	}
	return IssuedKey{Account: Account{ServiceAccount: a, Roles: []string{iam.RoleInstanceWorkload}, Keys: []ServiceAccountKey{key}},
		Key: key, PrivateKeyPEM: priv, TokenURL: s.TokenURL()}, nil
}

// RekeyWorkload gives a workload account a new key and revokes the others
// at once: each deployment receives its own key and the previous one dies
// with the previous container.
func (s *Service) RekeyWorkload(ctx context.Context, outer storage.Tx, projectID, id string) (IssuedKey, error) {
	tx := s.Store.Join(outer)
	cur, err := s.load(ctx, tx, projectID, id)
	if err != nil {
		return IssuedKey{}, err
	}
	now := s.Now()
	key, priv, err := s.newKey("", "", now)
	if err != nil {
		return IssuedKey{}, err
	}
	key.ServiceAccountID = id
	if _, err := tx.ExpireServiceAccountKeys(ctx, id, now); err != nil {
		return IssuedKey{}, err
	}
	if err := tx.CreateServiceAccountKey(ctx, key); err != nil {
		return IssuedKey{}, err
	}
	return IssuedKey{Account: cur, Key: key, PrivateKeyPEM: priv, TokenURL: s.TokenURL()}, nil
}

// Lookup reads an account by id, whatever its project (the platform's own
// checks, such as granting an account an app's worker operations).
func (s *Service) Lookup(ctx context.Context, id string) (ServiceAccount, error) {
	return s.Store.Read().GetServiceAccount(ctx, id)
}

// KeyWorkload gives a workload account one more key and keeps the others:
// a member added to a running instance holds its own key beside the
// instance's deployment, and loses only its own when it is removed.
func (s *Service) KeyWorkload(ctx context.Context, outer storage.Tx, projectID, id string) (IssuedKey, error) {
	tx := s.Store.Join(outer)
	cur, err := s.load(ctx, tx, projectID, id)
	if err != nil {
		return IssuedKey{}, err
	}
	key, priv, err := s.newKey("", "", s.Now())
	if err != nil {
		return IssuedKey{}, err
	}
	key.ServiceAccountID = id
	if err := tx.CreateServiceAccountKey(ctx, key); err != nil {
		return IssuedKey{}, err
	}
	return IssuedKey{Account: cur, Key: key, PrivateKeyPEM: priv, TokenURL: s.TokenURL()}, nil
}

// ExpireWorkloadKey ends one key of a workload account now (a removed
// member's); its tokens stop working at once.
func (s *Service) ExpireWorkloadKey(ctx context.Context, outer storage.Tx, id, keyID string) error {
	if id == "" || keyID == "" {
		return nil
	}
	return s.Store.Join(outer).ExpireServiceAccountKey(ctx, id, keyID, s.Now())
}

// RetireWorkload disables a workload account (its tokens stop working at
// once) and deletes it with its keys and bindings. Retiring an account that
// is already gone is a no-op, so teardown can be repeated.
func (s *Service) RetireWorkload(ctx context.Context, outer storage.Tx, projectID, id string) error {
	if id == "" {
		return nil
	}
	tx := s.Store.Join(outer)
	a, err := tx.GetServiceAccount(ctx, id)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && a.ProjectID != projectID) {
		return nil
	}
	if err != nil {
		return err
	}
	now := s.Now()
	if err := tx.SetServiceAccountStatus(ctx, id, AccountDisabled, now.Add(time.Millisecond), now); err != nil {
		return err
	}
	if err := tx.DeleteBindingsOfPrincipal(ctx, string(principal.ServiceAccount), id); err != nil {
		return err
	}
	return tx.DeleteServiceAccount(ctx, id)
}
