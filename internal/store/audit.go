package store

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuaas/gpuaas/internal/audit"
	"github.com/gpuaas/gpuaas/internal/storage"
)

var (
	_ audit.Tx      = (*Tx)(nil)
	_ audit.Queries = (*Queries)(nil)
)

// Audit is the audit retention's storage.
func Audit(db *DB) audit.Store { return NewPort[audit.Tx, audit.Queries](db) }

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

// pruneAuditBatch is how many rows one statement of PruneAudit deletes by
// default: enough to keep up with a busy install in a few statements an
// hour, few enough that no statement holds its locks for long.
const pruneAuditBatch = 10_000

// pruneAuditQuery deletes, of the batch oldest rows by id, those that
// occurred before the cutoff. Ids are UUIDv7, minted at the write (Tx.flush,
// resealSigningKey) from the wall clock, which in production is also the
// server's clock that stamps occurred_at, so id order is occurred_at order
// up to a clock step or the skew between replicas. Read by the primary
// key, the head of the log is found without an index on occurred_at
// (migration 0029 leaves it out on purpose, and one more index would slow
// every audited write), and a pass ends at the first batch holding a row
// inside the retention instead of walking every newer row to find none.
//
// The head's ids are then looked up by the primary key. On PostgreSQL
// they go in as an array: as `id IN (SELECT …)` the planner hash-joins
// the head with a sequential scan of the whole table (seen on 300,000
// rows: every batch read all of them). The batch is written into the
// text, not bound, so a generic plan of the prepared statement still
// knows how small the head is.
func pruneAuditQuery(d Dialect, batch int) string {
	head := fmt.Sprintf(`SELECT id FROM audit_events ORDER BY id LIMIT %d`, batch)
	if d == Postgres {
		return `DELETE FROM audit_events WHERE id = ANY(ARRAY(` + head + `)) AND occurred_at < ?`
	}
	return `DELETE FROM audit_events WHERE id IN (` + head + `) AND occurred_at < ?`
}

// PruneAudit deletes the audit rows that occurred before cutoff, batch rows
// per statement, until a statement deletes fewer; it returns how many rows
// it deleted (see audit.Queries).
func (q *Queries) PruneAudit(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	if batch <= 0 {
		batch = pruneAuditBatch
	}
	if err := storage.CheckTime("cutoff", cutoff); err != nil {
		return 0, err
	}
	query := pruneAuditQuery(q.d, batch)
	var total int64
	for {
		res, err := q.exec(ctx, query, ts(cutoff))
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
	}
}
