package store

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
)

const userCols = `id, email, display_name, password_hash, status, tokens_valid_after, created_at`

func scanUser(s interface{ Scan(...any) error }) (iam.User, error) {
	var u iam.User
	err := s.Scan(&u.ID, &u.Email, &u.DisplayName, &u.PasswordHash, &u.Status,
		scanTime(&u.TokensValidAfter), scanTime(&u.CreatedAt))
	return u, err
}

func (q *Queries) CreateUser(ctx context.Context, u iam.User) error {
	_, err := q.exec(ctx, `INSERT INTO users (`+userCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		u.ID, u.Email, u.DisplayName, u.PasswordHash, string(u.Status), ts(u.TokensValidAfter), ts(u.CreatedAt))
	return err
}

func (q *Queries) GetUser(ctx context.Context, id string) (iam.User, error) {
	u, err := scanUser(q.queryRow(ctx, `SELECT `+userCols+` FROM users WHERE id = ?`, id))
	return u, scanOne(err)
}

func (q *Queries) GetUserByEmail(ctx context.Context, email string) (iam.User, error) {
	u, err := scanUser(q.queryRow(ctx, `SELECT `+userCols+` FROM users WHERE email = ?`, email))
	return u, scanOne(err)
}

// SetUserStatus changes a user's status; a non-zero cutTokens also ends
// every token issued up to that time.
func (q *Queries) SetUserStatus(ctx context.Context, id string, status iam.UserStatus, cutTokens time.Time) error {
	if cutTokens.IsZero() {
		return q.execOne(ctx, `UPDATE users SET status = ? WHERE id = ?`, string(status), id)
	}
	return q.execOne(ctx, `UPDATE users SET status = ?, tokens_valid_after = ? WHERE id = ?`, string(status), ts(cutTokens), id)
}

func (q *Queries) ListUsers(ctx context.Context, p Page) ([]iam.User, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+userCols+` FROM users WHERE id > ? ORDER BY id`+limitClause(limit), after)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanUser)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(u iam.User) string { return u.ID })
	return out, next, nil
}

const bindingCols = `id, principal_type, principal_id, role, scope_type, scope_id, org_id, created_at`

func scanBinding(s interface{ Scan(...any) error }) (iam.RoleBinding, error) {
	var b iam.RoleBinding
	err := s.Scan(&b.ID, &b.PrincipalType, &b.PrincipalID, &b.Role, &b.ScopeType, &b.ScopeID, &b.OrgID, scanTime(&b.CreatedAt))
	return b, err
}

func (q *Queries) CreateRoleBinding(ctx context.Context, b iam.RoleBinding) error {
	_, err := q.exec(ctx, `INSERT INTO role_bindings (`+bindingCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		b.ID, b.PrincipalType, b.PrincipalID, b.Role, b.ScopeType, b.ScopeID, b.OrgID, ts(b.CreatedAt))
	return err
}

func (q *Queries) GetRoleBinding(ctx context.Context, id string) (iam.RoleBinding, error) {
	b, err := scanBinding(q.queryRow(ctx, `SELECT `+bindingCols+` FROM role_bindings WHERE id = ?`, id))
	return b, scanOne(err)
}

func (q *Queries) DeleteRoleBinding(ctx context.Context, id string) error {
	return q.execOne(ctx, `DELETE FROM role_bindings WHERE id = ?`, id)
}

// BindingsOfPrincipal returns every binding a principal holds.
func (q *Queries) BindingsOfPrincipal(ctx context.Context, principalType, principalID string) ([]iam.RoleBinding, error) {
	rows, err := q.query(ctx, `SELECT `+bindingCols+` FROM role_bindings WHERE principal_type = ? AND principal_id = ? ORDER BY id`,
		principalType, principalID)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanBinding)
}

// BindingsAtScope lists the bindings made at one scope.
func (q *Queries) BindingsAtScope(ctx context.Context, scopeType, scopeID string, p Page) ([]iam.RoleBinding, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+bindingCols+` FROM role_bindings WHERE scope_type = ? AND scope_id = ? AND id > ? ORDER BY id`+limitClause(limit),
		scopeType, scopeID, after)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanBinding)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(b iam.RoleBinding) string { return b.ID })
	return out, next, nil
}

// DeleteBindingsOfPrincipal removes every binding of a principal (account deletion).
func (q *Queries) DeleteBindingsOfPrincipal(ctx context.Context, principalType, principalID string) error {
	_, err := q.exec(ctx, `DELETE FROM role_bindings WHERE principal_type = ? AND principal_id = ?`, principalType, principalID)
	return err
}

// SetUserPassword replaces a password hash and cuts off existing tokens.
func (q *Queries) SetUserPassword(ctx context.Context, id, hash string, at time.Time) error {
	return q.execOne(ctx, `UPDATE users SET password_hash = ?, tokens_valid_after = ? WHERE id = ?`, hash, ts(at), id)
}
