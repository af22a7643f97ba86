package store

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/console"
	"github.com/gpuaas/gpuaas/internal/instances"
)

var _ console.Sessions = (*Queries)(nil)

const consoleSessionCols = `id_hash, user_id, csrf_token, project_id, created_at, last_seen_at, expires_at, ended_at`

func (q *Queries) InsertConsoleSession(ctx context.Context, s console.ConsoleSession) error {
	_, err := q.exec(ctx, `INSERT INTO console_sessions (`+consoleSessionCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, NULL)`,
		s.IDHash, s.UserID, s.CSRFToken, s.ProjectID, ts(s.CreatedAt), ts(s.LastSeenAt), ts(s.ExpiresAt))
	return err
}

func (q *Queries) GetConsoleSession(ctx context.Context, idHash string) (console.ConsoleSession, error) {
	var s console.ConsoleSession
	err := q.queryRow(ctx, `SELECT `+consoleSessionCols+` FROM console_sessions WHERE id_hash = ?`, idHash).Scan(
		&s.IDHash, &s.UserID, &s.CSRFToken, &s.ProjectID, scanTime(&s.CreatedAt), scanTime(&s.LastSeenAt), scanTime(&s.ExpiresAt), scanTime(&s.EndedAt))
	return s, scanOne(err)
}

// TouchConsoleSession moves a live session's last-seen time forward.
func (q *Queries) TouchConsoleSession(ctx context.Context, idHash string, at time.Time) error {
	_, err := q.exec(ctx, `UPDATE console_sessions SET last_seen_at = ? WHERE id_hash = ? AND ended_at IS NULL`, ts(at), idHash)
	return err
}

// SetConsoleSessionProject switches the project a session works in.
func (q *Queries) SetConsoleSessionProject(ctx context.Context, idHash, projectID string) error {
	_, err := q.exec(ctx, `UPDATE console_sessions SET project_id = ? WHERE id_hash = ? AND ended_at IS NULL`, projectID, idHash)
	return err
}

// EndConsoleSession ends a session for good (sign-out).
func (q *Queries) EndConsoleSession(ctx context.Context, idHash string, at time.Time) error {
	_, err := q.exec(ctx, `UPDATE console_sessions SET ended_at = ? WHERE id_hash = ? AND ended_at IS NULL`, ts(at), idHash)
	return err
}

// PruneConsoleSessions deletes sessions that ended or expired before cutoff.
func (q *Queries) PruneConsoleSessions(ctx context.Context, cutoff time.Time) error {
	_, err := q.exec(ctx, `DELETE FROM console_sessions WHERE expires_at < ? OR ended_at < ?`, ts(cutoff), ts(cutoff))
	return err
}

func (q *Queries) InsertUIOpenCode(ctx context.Context, c instances.UIOpenCode) error {
	if _, err := q.exec(ctx, `DELETE FROM ui_open_codes WHERE expires_at < ?`, ts(c.CreatedAt.Add(-time.Hour))); err != nil {
		return err
	}
	_, err := q.exec(ctx, `INSERT INTO ui_open_codes (code_hash, user_id, org_id, project_id, instance_id, port, created_at, expires_at, used_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)`,
		c.CodeHash, c.UserID, c.OrgID, c.ProjectID, c.InstanceID, c.Port, ts(c.CreatedAt), ts(c.ExpiresAt))
	return err
}

// RedeemUIOpenCode marks an unexpired, unused code used and returns it, in
// one statement: of two redemptions racing, one wins. ErrNotFound for a
// code that is unknown, expired, already used or for another instance.
func (q *Queries) RedeemUIOpenCode(ctx context.Context, codeHash, instanceID string, at time.Time) (instances.UIOpenCode, error) {
	res, err := q.exec(ctx, `UPDATE ui_open_codes SET used_at = ? WHERE code_hash = ? AND instance_id = ? AND used_at IS NULL AND expires_at > ?`,
		ts(at), codeHash, instanceID, ts(at))
	if err != nil {
		return instances.UIOpenCode{}, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if err == nil {
			err = ErrNotFound
		}
		return instances.UIOpenCode{}, err
	}
	return q.uiOpenCode(ctx, ``, codeHash)
}

// UsableUIOpenCode returns a code RedeemUIOpenCode would redeem at at,
// without using it. ErrNotFound as RedeemUIOpenCode.
func (q *Queries) UsableUIOpenCode(ctx context.Context, codeHash, instanceID string, at time.Time) (instances.UIOpenCode, error) {
	return q.uiOpenCode(ctx, ` AND instance_id = ? AND used_at IS NULL AND expires_at > ?`, codeHash, instanceID, ts(at))
}

func (q *Queries) uiOpenCode(ctx context.Context, cond string, codeHash string, args ...any) (instances.UIOpenCode, error) {
	var c instances.UIOpenCode
	err := q.queryRow(ctx, `SELECT code_hash, user_id, org_id, project_id, instance_id, port, created_at, expires_at, used_at
		FROM ui_open_codes WHERE code_hash = ?`+cond, append([]any{codeHash}, args...)...).Scan(&c.CodeHash, &c.UserID, &c.OrgID, &c.ProjectID, &c.InstanceID,
		&c.Port, scanTime(&c.CreatedAt), scanTime(&c.ExpiresAt), scanTime(&c.UsedAt))
	return c, scanOne(err)
}
