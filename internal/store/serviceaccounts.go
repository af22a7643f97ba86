package store

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
)

var (
	_ serviceaccounts.Tx      = (*Tx)(nil)
	_ serviceaccounts.Queries = (*Queries)(nil)
)

// ServiceAccounts is the service-account domain's storage.
func ServiceAccounts(db *DB) serviceaccounts.Store {
	return NewPort[serviceaccounts.Tx, serviceaccounts.Queries](db)
}

const saCols = `id, org_id, project_id, slug, name, description, status, tokens_valid_after, created_at, updated_at`

func scanServiceAccount(s interface{ Scan(...any) error }) (serviceaccounts.ServiceAccount, error) {
	var a serviceaccounts.ServiceAccount
	err := s.Scan(&a.ID, &a.OrgID, &a.ProjectID, &a.Slug, &a.Name, &a.Description, &a.Status,
		scanTime(&a.TokensValidAfter), scanTime(&a.CreatedAt), scanTime(&a.UpdatedAt))
	return a, err
}

func (q *Queries) CreateServiceAccount(ctx context.Context, a serviceaccounts.ServiceAccount) error {
	_, err := q.exec(ctx, `INSERT INTO service_accounts (`+saCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.ID, a.OrgID, a.ProjectID, a.Slug, a.Name, a.Description, string(a.Status), ts(a.TokensValidAfter), ts(a.CreatedAt), ts(a.UpdatedAt))
	return err
}

func (q *Queries) GetServiceAccount(ctx context.Context, id string) (serviceaccounts.ServiceAccount, error) {
	a, err := scanServiceAccount(q.queryRow(ctx, `SELECT `+saCols+` FROM service_accounts WHERE id = ?`, id))
	return a, scanOne(err)
}

// LockServiceAccount reads an account and holds its row until the
// transaction ends (FOR UPDATE on PostgreSQL; a SQLite mutation holds the
// database already).
func (q *Queries) LockServiceAccount(ctx context.Context, id string) (serviceaccounts.ServiceAccount, error) {
	a, err := scanServiceAccount(q.queryRow(ctx, `SELECT `+saCols+` FROM service_accounts WHERE id = ?`+q.forUpdate(), id))
	return a, scanOne(err)
}

// ListServiceAccounts lists the accounts of a project in creation order.
func (q *Queries) ListServiceAccounts(ctx context.Context, projectID string, p Page) ([]serviceaccounts.ServiceAccount, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+saCols+` FROM service_accounts WHERE project_id = ? AND id > ? ORDER BY id`+limitClause(limit),
		projectID, after)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanServiceAccount)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(a serviceaccounts.ServiceAccount) string { return a.ID })
	return out, next, nil
}

// SetServiceAccountStatus changes the status; a non-zero validAfter also
// cuts off the tokens minted before it.
func (q *Queries) SetServiceAccountStatus(ctx context.Context, id string, status serviceaccounts.AccountStatus, validAfter, at time.Time) error {
	if validAfter.IsZero() {
		return q.execOne(ctx, `UPDATE service_accounts SET status = ?, updated_at = ? WHERE id = ?`, string(status), ts(at), id)
	}
	return q.execOne(ctx, `UPDATE service_accounts SET status = ?, tokens_valid_after = ?, updated_at = ? WHERE id = ?`,
		string(status), ts(validAfter), ts(at), id)
}

// DeleteServiceAccount removes an account with its used assertion ids; its
// keys go with it (ON DELETE CASCADE).
func (q *Queries) DeleteServiceAccount(ctx context.Context, id string) error {
	if _, err := q.exec(ctx, `DELETE FROM service_account_assertions WHERE service_account_id = ?`, id); err != nil {
		return err
	}
	return q.execOne(ctx, `DELETE FROM service_accounts WHERE id = ?`, id)
}

const saKeyCols = `id, service_account_id, algorithm, public_key, created_at, expires_at`

func scanServiceAccountKey(s interface{ Scan(...any) error }) (serviceaccounts.ServiceAccountKey, error) {
	var k serviceaccounts.ServiceAccountKey
	err := s.Scan(&k.ID, &k.ServiceAccountID, &k.Algorithm, &k.PublicKey, scanTime(&k.CreatedAt), scanTime(&k.ExpiresAt))
	return k, err
}

func (q *Queries) CreateServiceAccountKey(ctx context.Context, k serviceaccounts.ServiceAccountKey) error {
	_, err := q.exec(ctx, `INSERT INTO service_account_keys (`+saKeyCols+`) VALUES (?, ?, ?, ?, ?, ?)`,
		k.ID, k.ServiceAccountID, k.Algorithm, k.PublicKey, ts(k.CreatedAt), nullTS(k.ExpiresAt))
	return err
}

func (q *Queries) GetServiceAccountKey(ctx context.Context, id string) (serviceaccounts.ServiceAccountKey, error) {
	k, err := scanServiceAccountKey(q.queryRow(ctx, `SELECT `+saKeyCols+` FROM service_account_keys WHERE id = ?`, id))
	return k, scanOne(err)
}

// KeysOfServiceAccounts returns the keys of the given accounts, oldest first.
func (q *Queries) KeysOfServiceAccounts(ctx context.Context, ids []string) ([]serviceaccounts.ServiceAccountKey, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := q.query(ctx, `SELECT `+saKeyCols+` FROM service_account_keys WHERE service_account_id IN (`+placeholders(len(ids))+`) ORDER BY id`, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanServiceAccountKey)
}

// ExpireServiceAccountKeys makes every key of an account that is valid
// beyond at expire at at (earlier expiries are kept). It returns how many
// keys it changed.
func (q *Queries) ExpireServiceAccountKeys(ctx context.Context, accountID string, at time.Time) (int64, error) {
	res, err := q.exec(ctx, `UPDATE service_account_keys SET expires_at = ? WHERE service_account_id = ? AND (expires_at IS NULL OR expires_at > ?)`,
		ts(at), accountID, ts(at))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// ExpireServiceAccountKey makes one key of an account expire at at, unless
// it expires earlier.
func (q *Queries) ExpireServiceAccountKey(ctx context.Context, accountID, keyID string, at time.Time) error {
	_, err := q.exec(ctx, `UPDATE service_account_keys SET expires_at = ? WHERE service_account_id = ? AND id = ? AND (expires_at IS NULL OR expires_at > ?)`,
		ts(at), accountID, keyID, ts(at))
	return err
}

// ServiceAccountWithKey reads an account and one of its keys in one query:
// the per-request check of service-account tokens.
func (q *Queries) ServiceAccountWithKey(ctx context.Context, accountID, keyID string) (serviceaccounts.ServiceAccount, serviceaccounts.ServiceAccountKey, error) {
	var (
		a serviceaccounts.ServiceAccount
		k serviceaccounts.ServiceAccountKey
	)
	err := q.queryRow(ctx, `SELECT a.id, a.org_id, a.project_id, a.status, a.tokens_valid_after, k.id, k.algorithm, k.expires_at
		FROM service_accounts a JOIN service_account_keys k ON k.service_account_id = a.id WHERE a.id = ? AND k.id = ?`, accountID, keyID).
		Scan(&a.ID, &a.OrgID, &a.ProjectID, &a.Status, scanTime(&a.TokensValidAfter), &k.ID, &k.Algorithm, scanTime(&k.ExpiresAt))
	k.ServiceAccountID = a.ID
	return a, k, scanOne(err)
}

// ServiceAccountRoles returns the roles bound to each of the given accounts.
func (q *Queries) ServiceAccountRoles(ctx context.Context, ids []string) (map[string][]string, error) {
	out := map[string][]string{}
	if len(ids) == 0 {
		return out, nil
	}
	args := []any{"service_account"}
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := q.query(ctx, `SELECT principal_id, role FROM role_bindings WHERE principal_type = ? AND principal_id IN (`+placeholders(len(ids))+`) ORDER BY principal_id, role`, args...)
	if err != nil {
		return nil, err
	}
	type pr struct{ id, role string }
	prs, err := collect(rows, func(s interface{ Scan(...any) error }) (pr, error) {
		var v pr
		return v, s.Scan(&v.id, &v.role)
	})
	for _, v := range prs {
		out[v.id] = append(out[v.id], v.role)
	}
	return out, err
}

// UseAssertionID records that an assertion id was exchanged. ErrAlreadyExists
// means it was used before: a replay. The unique key makes this hold under
// concurrent exchanges too.
func (q *Queries) UseAssertionID(ctx context.Context, accountID, jti string, expiresAt time.Time) error {
	_, err := q.exec(ctx, `INSERT INTO service_account_assertions (service_account_id, jti, expires_at) VALUES (?, ?, ?)`,
		accountID, jti, ts(expiresAt))
	return err
}

// PurgeExpiredAssertionIDs forgets assertion ids whose assertions have
// expired: those assertions are refused for their expiry anyway.
func (q *Queries) PurgeExpiredAssertionIDs(ctx context.Context, now time.Time) (int64, error) {
	res, err := q.exec(ctx, `DELETE FROM service_account_assertions WHERE expires_at < ?`, ts(now))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
