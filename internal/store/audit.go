package store

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// AuditEvent and AuditFilter are storage's: the audit row is part of every
// domain's mutation.
type (
	AuditEvent  = storage.AuditEvent
	AuditFilter = storage.AuditFilter
)

const auditCols = `id, occurred_at, actor_type, actor_id, org_id, project_id, action, resource_type, resource_id, before_state, after_state, reason, correlation_id, outcome`

func (q *Queries) InsertAudit(ctx context.Context, e AuditEvent) error {
	return q.execHeld(ctx, `INSERT INTO audit_events (`+auditCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.ID, ts(e.OccurredAt), e.ActorType, e.ActorID, e.OrgID, e.ProjectID, e.Action, e.ResourceType, e.ResourceID,
		jsonText(e.Before), jsonText(e.After), e.Reason, e.CorrelationID, e.Outcome)
}

func scanAudit(s interface{ Scan(...any) error }) (AuditEvent, error) {
	var e AuditEvent
	err := s.Scan(&e.ID, scanTime(&e.OccurredAt), &e.ActorType, &e.ActorID, &e.OrgID, &e.ProjectID, &e.Action,
		&e.ResourceType, &e.ResourceID, scanJSON(&e.Before), scanJSON(&e.After), &e.Reason, &e.CorrelationID, &e.Outcome)
	return e, err
}

// ListAudit returns audit events newest first.
func (q *Queries) ListAudit(ctx context.Context, f AuditFilter, p Page) ([]AuditEvent, string, error) {
	before, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	query := `SELECT ` + auditCols + ` FROM audit_events WHERE 1=1`
	var args []any
	add := func(cond string, v any) { query += " AND " + cond; args = append(args, v) }
	if before != "" {
		add("id < ?", before)
	}
	for _, c := range []struct{ col, v string }{
		{"org_id", f.OrgID}, {"project_id", f.ProjectID}, {"actor_id", f.ActorID}, {"action", f.Action},
		{"resource_type", f.ResourceType}, {"resource_id", f.ResourceID}, {"correlation_id", f.CorrelationID}, {"outcome", f.Outcome},
	} {
		if c.v != "" {
			add(c.col+" = ?", c.v)
		}
	}
	if err := addTimeBounds(add, timeBound{"since", "occurred_at >= ?", f.Since}, timeBound{"until", "occurred_at < ?", f.Until}); err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, query+` ORDER BY id DESC`+limitClause(limit), args...)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanAudit)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(e AuditEvent) string { return e.ID })
	return out, next, nil
}
