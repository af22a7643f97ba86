package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// The service-account domain's storage (serviceaccounts.Store) on both
// dialects: accounts, their keys and key expiry, the per-request account
// and key read, assertion ids, and the account's role bindings.
func TestServiceAccountsConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		for _, c := range []conformanceCase{
			{"accounts", testServiceAccounts},
			{"account_status", testServiceAccountStatus},
			{"account_lists", testServiceAccountLists},
			{"keys", testServiceAccountKeys},
			{"key_expiry", testServiceAccountKeyExpiry},
			{"account_with_key", testServiceAccountWithKey},
			{"assertion_ids", testServiceAccountAssertionIDs},
			{"roles_and_delete", testServiceAccountRolesAndDelete},
		} {
			t.Run(c.name, func(t *testing.T) { c.run(t, db) })
		}
	})
}

func mkAccount(t *testing.T, s serviceaccounts.Store, o iam.Org, p iam.Project, slug string) serviceaccounts.ServiceAccount {
	t.Helper()
	a := serviceaccounts.ServiceAccount{ID: newID(), OrgID: o.ID, ProjectID: p.ID, Slug: slug, Name: slug, Status: serviceaccounts.AccountActive,
		TokensValidAfter: t0, CreatedAt: t0, UpdatedAt: t0}
	noErr(t, "create account", s.Read().CreateServiceAccount(context.Background(), a))
	return a
}

func mkKey(t *testing.T, s serviceaccounts.Store, a serviceaccounts.ServiceAccount, expires time.Time) serviceaccounts.ServiceAccountKey {
	t.Helper()
	k := serviceaccounts.ServiceAccountKey{ID: newID(), ServiceAccountID: a.ID, Algorithm: "EdDSA", PublicKey: "pem-" + a.Slug, CreatedAt: t0, ExpiresAt: expires}
	noErr(t, "create key", s.Read().CreateServiceAccountKey(context.Background(), k))
	return k
}

func testServiceAccounts(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.ServiceAccounts(db).Read()
	o, p := tenant(t, db, "sa")
	p2 := mkProject(t, db, o, "sa2")
	a := serviceaccounts.ServiceAccount{ID: newID(), OrgID: o.ID, ProjectID: p.ID, Slug: "deployer", Name: "Deployer", Description: "CI deploys",
		Status: serviceaccounts.AccountActive, TokensValidAfter: at(-time.Hour), CreatedAt: t0, UpdatedAt: at(time.Second)}
	noErr(t, "create", q.CreateServiceAccount(ctx, a))
	got, err := q.GetServiceAccount(ctx, a.ID)
	noErr(t, "get", err)
	same(t, "account round trip", got, a)
	_, err = q.GetServiceAccount(ctx, newID())
	wantErr(t, "missing account", err, storage.ErrNotFound)

	dup := a
	dup.Slug = "other"
	wantErr(t, "duplicate id", q.CreateServiceAccount(ctx, dup), storage.ErrAlreadyExists)
	dup = a
	dup.ID = newID()
	wantErr(t, "duplicate slug in the project", q.CreateServiceAccount(ctx, dup), storage.ErrAlreadyExists)
	dup.ProjectID = p2.ID
	noErr(t, "same slug in another project", q.CreateServiceAccount(ctx, dup))
	bad := a
	bad.ID, bad.ProjectID = newID(), newID()
	wantErr(t, "account of a missing project", q.CreateServiceAccount(ctx, bad), storage.ErrConflict)
	bad = a
	bad.ID, bad.OrgID, bad.Slug = newID(), newID(), "orphan"
	wantErr(t, "account of a missing org", q.CreateServiceAccount(ctx, bad), storage.ErrConflict)
	bad = a
	bad.ID, bad.Slug, bad.Status = newID(), "weird", "suspended"
	wantErr(t, "unknown status", q.CreateServiceAccount(ctx, bad), storage.ErrConflict)
}

func testServiceAccountStatus(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.ServiceAccounts(db)
	q := s.Read()
	o, p := tenant(t, db, "status")
	a := mkAccount(t, s, o, p, "st")

	// Disabling moves the token cut-off; enabling without one keeps it.
	noErr(t, "disable", q.SetServiceAccountStatus(ctx, a.ID, serviceaccounts.AccountDisabled, at(time.Minute), at(2*time.Minute)))
	want := a
	want.Status, want.TokensValidAfter, want.UpdatedAt = serviceaccounts.AccountDisabled, at(time.Minute), at(2*time.Minute)
	got, _ := q.GetServiceAccount(ctx, a.ID)
	same(t, "disabled", got, want)
	noErr(t, "enable", q.SetServiceAccountStatus(ctx, a.ID, serviceaccounts.AccountActive, time.Time{}, at(3*time.Minute)))
	want.Status, want.UpdatedAt = serviceaccounts.AccountActive, at(3*time.Minute)
	got, _ = q.GetServiceAccount(ctx, a.ID)
	same(t, "enabled (cut-off kept)", got, want)

	wantErr(t, "status of a missing account", q.SetServiceAccountStatus(ctx, newID(), serviceaccounts.AccountDisabled, time.Time{}, t0), storage.ErrNotFound)
	wantErr(t, "status with cut-off of a missing account", q.SetServiceAccountStatus(ctx, newID(), serviceaccounts.AccountDisabled, t0, t0), storage.ErrNotFound)
	wantErr(t, "unknown status", q.SetServiceAccountStatus(ctx, a.ID, "suspended", time.Time{}, t0), storage.ErrConflict)
}

func testServiceAccountLists(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.ServiceAccounts(db)
	o, p := tenant(t, db, "salist")
	other := mkProject(t, db, o, "salist-other")
	mkAccount(t, s, o, other, "elsewhere")
	var want []serviceaccounts.ServiceAccount
	noErr(t, "bulk accounts", s.InTx(ctx, func(q serviceaccounts.Queries) error {
		for i := 0; i <= storage.MaxPageLimit; i++ {
			a := serviceaccounts.ServiceAccount{ID: newID(), OrgID: o.ID, ProjectID: p.ID, Slug: fmt.Sprintf("sa-%d", i), Name: "n",
				Status: serviceaccounts.AccountActive, TokensValidAfter: t0, CreatedAt: t0, UpdatedAt: t0}
			if err := q.CreateServiceAccount(ctx, a); err != nil {
				return err
			}
			want = append(want, a)
		}
		return nil
	}))
	list := func(pg storage.Page) ([]serviceaccounts.ServiceAccount, string, error) {
		return s.Read().ListServiceAccounts(ctx, p.ID, pg)
	}
	same(t, "paged accounts of the project", pageAll(t, 100, list), want)
	checkClamp(t, len(want), list)
	got, next, err := s.Read().ListServiceAccounts(ctx, newID(), storage.Page{})
	if err != nil || len(got) != 0 || next != "" {
		t.Fatalf("accounts of a missing project: %v %q %v", got, next, err)
	}
}

func testServiceAccountKeys(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.ServiceAccounts(db)
	q := s.Read()
	o, p := tenant(t, db, "keys")
	a, b := mkAccount(t, s, o, p, "a"), mkAccount(t, s, o, p, "b")
	k := serviceaccounts.ServiceAccountKey{ID: newID(), ServiceAccountID: a.ID, Algorithm: "ES256",
		PublicKey: "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n", CreatedAt: t0, ExpiresAt: at(90 * 24 * time.Hour)}
	noErr(t, "create key", q.CreateServiceAccountKey(ctx, k))
	got, err := q.GetServiceAccountKey(ctx, k.ID)
	noErr(t, "get key", err)
	same(t, "key round trip", got, k)
	forever := mkKey(t, s, a, time.Time{})
	got, _ = q.GetServiceAccountKey(ctx, forever.ID)
	same(t, "key without expiry", got, forever)
	if !got.ActiveAt(at(1000 * time.Hour)) {
		t.Fatal("a key without expiry is active")
	}
	_, err = q.GetServiceAccountKey(ctx, newID())
	wantErr(t, "missing key", err, storage.ErrNotFound)
	wantErr(t, "duplicate key", q.CreateServiceAccountKey(ctx, k), storage.ErrAlreadyExists)
	bad := k
	bad.ID, bad.ServiceAccountID = newID(), newID()
	wantErr(t, "key of a missing account", q.CreateServiceAccountKey(ctx, bad), storage.ErrConflict)
	bad = k
	bad.ID, bad.Algorithm = newID(), "RS256"
	wantErr(t, "unknown algorithm", q.CreateServiceAccountKey(ctx, bad), storage.ErrConflict)

	kb := mkKey(t, s, b, at(time.Hour))
	keys, err := q.KeysOfServiceAccounts(ctx, []string{b.ID, a.ID})
	noErr(t, "keys of accounts", err)
	same(t, "keys of both accounts, oldest first", keys, []serviceaccounts.ServiceAccountKey{k, forever, kb})
	keys, _ = q.KeysOfServiceAccounts(ctx, []string{b.ID, newID()})
	same(t, "keys of one account", keys, []serviceaccounts.ServiceAccountKey{kb})
	keys, err = q.KeysOfServiceAccounts(ctx, nil)
	if err != nil || len(keys) != 0 {
		t.Fatalf("keys of no accounts: %v %v", keys, err)
	}
}

func testServiceAccountKeyExpiry(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.ServiceAccounts(db)
	q := s.Read()
	o, p := tenant(t, db, "expiry")
	a, b := mkAccount(t, s, o, p, "a"), mkAccount(t, s, o, p, "b")
	forever := mkKey(t, s, a, time.Time{})
	later := mkKey(t, s, a, at(time.Hour))
	earlier := mkKey(t, s, a, at(time.Minute))
	atCut := mkKey(t, s, a, at(10*time.Minute))
	otherAccount := mkKey(t, s, b, time.Time{})

	// Revoking at t: keys valid beyond t expire at t; earlier expiries stay.
	expire := func(at time.Time) int64 {
		var n int64
		noErr(t, "expire keys", s.Mutate(ctx, func(tx serviceaccounts.Tx) error {
			var err error
			if n, err = tx.ExpireServiceAccountKeys(ctx, a.ID, at); err != nil {
				return err
			}
			return audited(tx)
		}))
		return n
	}
	cut := at(10 * time.Minute)
	if n := expire(cut); n != 2 {
		t.Fatalf("expired %d keys, want 2 (the one without expiry and the later one)", n)
	}
	for _, c := range []struct {
		k    serviceaccounts.ServiceAccountKey
		want time.Time
	}{{forever, cut}, {later, cut}, {earlier, at(time.Minute)}, {atCut, cut}, {otherAccount, time.Time{}}} {
		got, err := q.GetServiceAccountKey(ctx, c.k.ID)
		noErr(t, "get key", err)
		if !got.ExpiresAt.Equal(c.want) {
			t.Fatalf("key expiring %v now expires %v, want %v", c.k.ExpiresAt, got.ExpiresAt, c.want)
		}
		if got.ActiveAt(cut) {
			if c.k.ID != otherAccount.ID {
				t.Fatalf("key %v still active at the cut", c.k.ExpiresAt)
			}
		}
	}
	if n := expire(cut); n != 0 {
		t.Fatalf("expiring again changed %d keys, want 0", n)
	}
	if n := expire(at(time.Second)); n != 4 {
		t.Fatalf("expiring earlier changed %d keys, want 4", n)
	}
	n, err := q.ExpireServiceAccountKeys(ctx, newID(), t0)
	if err != nil || n != 0 {
		t.Fatalf("expiring the keys of a missing account: %d %v", n, err)
	}
}

func testServiceAccountWithKey(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.ServiceAccounts(db)
	q := s.Read()
	o, p := tenant(t, db, "withkey")
	a, b := mkAccount(t, s, o, p, "a"), mkAccount(t, s, o, p, "b")
	k := mkKey(t, s, a, at(time.Hour))
	kb := mkKey(t, s, b, time.Time{})
	noErr(t, "disable", q.SetServiceAccountStatus(ctx, a.ID, serviceaccounts.AccountDisabled, at(time.Minute), at(time.Minute)))

	gotA, gotK, err := q.ServiceAccountWithKey(ctx, a.ID, k.ID)
	noErr(t, "account with key", err)
	// What the per-request check reads: status and cut-off of the account,
	// algorithm and expiry of the key.
	same(t, "account", gotA, serviceaccounts.ServiceAccount{ID: a.ID, OrgID: o.ID, ProjectID: p.ID, Status: serviceaccounts.AccountDisabled, TokensValidAfter: at(time.Minute)})
	same(t, "key", gotK, serviceaccounts.ServiceAccountKey{ID: k.ID, ServiceAccountID: a.ID, Algorithm: "EdDSA", ExpiresAt: at(time.Hour)})
	_, _, err = q.ServiceAccountWithKey(ctx, a.ID, kb.ID)
	wantErr(t, "another account's key", err, storage.ErrNotFound)
	_, _, err = q.ServiceAccountWithKey(ctx, a.ID, newID())
	wantErr(t, "missing key", err, storage.ErrNotFound)
	_, _, err = q.ServiceAccountWithKey(ctx, newID(), k.ID)
	wantErr(t, "missing account", err, storage.ErrNotFound)
	_, gotK, err = q.ServiceAccountWithKey(ctx, b.ID, kb.ID)
	if err != nil || !gotK.ExpiresAt.IsZero() {
		t.Fatalf("key without expiry: %+v %v", gotK, err)
	}
}

func testServiceAccountAssertionIDs(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.ServiceAccounts(db).Read()
	a1, a2 := newID(), newID()
	// Far from the other cases' times: the purge spans every account.
	base := at(-100 * time.Hour)
	noErr(t, "use", q.UseAssertionID(ctx, a1, "j1", base.Add(time.Minute)))
	wantErr(t, "replay", q.UseAssertionID(ctx, a1, "j1", base.Add(time.Minute)), storage.ErrAlreadyExists)
	noErr(t, "same jti, other account", q.UseAssertionID(ctx, a2, "j1", base.Add(time.Minute)))
	noErr(t, "expired", q.UseAssertionID(ctx, a1, "j0", base.Add(-time.Minute)))
	noErr(t, "expiring at the purge", q.UseAssertionID(ctx, a1, "jnow", base))

	n, err := q.PurgeExpiredAssertionIDs(ctx, base)
	if err != nil || n != 1 {
		t.Fatalf("purged %d %v, want 1", n, err)
	}
	noErr(t, "expired jti forgotten", q.UseAssertionID(ctx, a1, "j0", base.Add(time.Hour)))
	wantErr(t, "jti expiring at the purge kept", q.UseAssertionID(ctx, a1, "jnow", base), storage.ErrAlreadyExists)
	wantErr(t, "live jti kept", q.UseAssertionID(ctx, a1, "j1", base), storage.ErrAlreadyExists)
	n, err = q.PurgeExpiredAssertionIDs(ctx, base)
	if err != nil || n != 0 {
		t.Fatalf("second purge: %d %v", n, err)
	}
}

func testServiceAccountRolesAndDelete(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.ServiceAccounts(db)
	q := s.Read()
	o, p := tenant(t, db, "roles")
	a, b := mkAccount(t, s, o, p, "a"), mkAccount(t, s, o, p, "b")
	bind := func(acct serviceaccounts.ServiceAccount, role string) {
		noErr(t, "bind", q.CreateRoleBinding(ctx, iam.RoleBinding{ID: newID(), PrincipalType: "service_account", PrincipalID: acct.ID,
			Role: role, ScopeType: "project", ScopeID: p.ID, OrgID: o.ID, CreatedAt: t0}))
	}
	bind(a, "project.viewer")
	bind(a, "artifacts.publisher")
	bind(b, "project.viewer")
	roles, err := q.ServiceAccountRoles(ctx, []string{a.ID, b.ID, newID()})
	noErr(t, "roles", err)
	same(t, "roles", roles, map[string][]string{a.ID: {"artifacts.publisher", "project.viewer"}, b.ID: {"project.viewer"}})
	roles, err = q.ServiceAccountRoles(ctx, nil)
	if err != nil || len(roles) != 0 {
		t.Fatalf("roles of no accounts: %v %v", roles, err)
	}

	ka := mkKey(t, s, a, time.Time{})
	kb := mkKey(t, s, b, time.Time{})
	noErr(t, "use jti", q.UseAssertionID(ctx, a.ID, "j", at(time.Hour)))
	noErr(t, "use jti of b", q.UseAssertionID(ctx, b.ID, "j", at(time.Hour)))
	noErr(t, "delete a", s.Mutate(ctx, func(tx serviceaccounts.Tx) error {
		if err := tx.DeleteBindingsOfPrincipal(ctx, "service_account", a.ID); err != nil {
			return err
		}
		if err := tx.DeleteServiceAccount(ctx, a.ID); err != nil {
			return err
		}
		return audited(tx)
	}))
	_, err = q.GetServiceAccount(ctx, a.ID)
	wantErr(t, "deleted account", err, storage.ErrNotFound)
	_, err = q.GetServiceAccountKey(ctx, ka.ID)
	wantErr(t, "key of the deleted account", err, storage.ErrNotFound)
	noErr(t, "jti of the deleted account forgotten", q.UseAssertionID(ctx, a.ID, "j", at(time.Hour)))
	wantErr(t, "jti of b kept", q.UseAssertionID(ctx, b.ID, "j", at(time.Hour)), storage.ErrAlreadyExists)
	roles, _ = q.ServiceAccountRoles(ctx, []string{a.ID, b.ID})
	same(t, "roles after delete", roles, map[string][]string{b.ID: {"project.viewer"}})
	if _, err := q.GetServiceAccountKey(ctx, kb.ID); err != nil {
		t.Fatalf("b's key: %v", err)
	}
	wantErr(t, "delete twice", q.DeleteServiceAccount(ctx, a.ID), storage.ErrNotFound)
}
