package store

import (
	"context"
	"sort"
	"strings"
	"time"
)

// ForceSchemaVersionForTest records a schema version as if a newer binary had run.
func ForceSchemaVersionForTest(ctx context.Context, q *Queries, v int) error {
	_, err := q.exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', ?)`, v, ts(time.Now()))
	return err
}

// OutboxByCorrelationForTest returns the outbox rows written under one
// correlation id, oldest first.
func OutboxByCorrelationForTest(ctx context.Context, q *Queries, correlationID string) ([]Event, error) {
	rows, err := q.query(ctx, `SELECT id, type, subject, org_id, project_id, actor, correlation_id, data FROM outbox_events WHERE correlation_id = ? ORDER BY id`, correlationID)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (Event, error) {
		var e Event
		err := s.Scan(&e.ID, &e.Type, &e.Subject, &e.OrgID, &e.ProjectID, &e.Actor, &e.CorrelationID, scanJSON(&e.Data))
		return e, err
	})
}

// LockWaitersForTest counts the other sessions of this database waiting
// on a lock (PostgreSQL); of this test's own (storetest's application_name),
// not of tests running beside it on the same server.
func LockWaitersForTest(ctx context.Context, db *DB) (int, error) {
	var n int
	err := db.sql.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
		AND application_name = current_setting('application_name')`).Scan(&n)
	return n, err
}

// IdleInTransactionForTest counts this database's sessions left inside a
// transaction with nothing running (PostgreSQL).
func IdleInTransactionForTest(ctx context.Context, db *DB) (int, error) {
	var n int
	// Only this database's own sessions: storetest names them after the
	// test's schema, and other test processes share the server.
	err := db.sql.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'
		AND application_name = current_setting('application_name')`).Scan(&n)
	return n, err
}

// SessionsForTest is how many sessions this database has had (PostgreSQL).
func SessionsForTest(ctx context.Context, db *DB) (int64, error) {
	var n int64
	err := db.sql.QueryRowContext(ctx, `SELECT sessions FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}

// SchemaShape describes a migrated schema by name only, so the two
// dialects can be compared: columns per table, indexes (not the ones a
// primary key or unique constraint makes implicitly), and which row events
// each table's triggers guard.
type SchemaShape struct {
	Columns  map[string][]string // table → sorted column names
	Indexes  map[string]string   // index name → table
	Triggers map[string][]string // table → sorted distinct events (UPDATE, DELETE, INSERT)
}

// SchemaShapeForTest reads the shape of db's migrated schema.
func SchemaShapeForTest(ctx context.Context, db *DB) (SchemaShape, error) {
	s := SchemaShape{Columns: map[string][]string{}, Indexes: map[string]string{}, Triggers: map[string][]string{}}
	var colQ, idxQ, trgQ string
	if db.dialect == SQLite {
		colQ = `SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p
			WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' ORDER BY 1, 2`
		idxQ = `SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL`
		trgQ = `SELECT tbl_name, sql FROM sqlite_master WHERE type = 'trigger'`
	} else {
		colQ = `SELECT table_name, column_name FROM information_schema.columns
			WHERE table_schema = current_schema() ORDER BY 1, 2`
		idxQ = `SELECT i.indexname, i.tablename FROM pg_indexes i
			WHERE i.schemaname = current_schema() AND NOT EXISTS (
				SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname AND c.connamespace = to_regnamespace(current_schema()))`
		trgQ = `SELECT event_object_table, event_manipulation FROM information_schema.triggers
			WHERE trigger_schema = current_schema()`
	}
	q := db.Queries()
	pairs := func(query string, add func(a, b string)) error {
		rows, err := q.query(ctx, query)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var a, b string
			if err := rows.Scan(&a, &b); err != nil {
				return err
			}
			add(a, b)
		}
		return rows.Err()
	}
	if err := pairs(colQ, func(t, c string) { s.Columns[t] = append(s.Columns[t], c) }); err != nil {
		return s, err
	}
	if err := pairs(idxQ, func(i, t string) { s.Indexes[i] = t }); err != nil {
		return s, err
	}
	events := map[string]map[string]bool{}
	if err := pairs(trgQ, func(t, what string) {
		if events[t] == nil {
			events[t] = map[string]bool{}
		}
		// SQLite gives the trigger's SQL; PostgreSQL one row per event.
		for _, ev := range []string{"INSERT", "UPDATE", "DELETE"} {
			if db.dialect == Postgres && what == ev ||
				db.dialect == SQLite && (strings.Contains(strings.ToUpper(what), "BEFORE "+ev) || strings.Contains(strings.ToUpper(what), "AFTER "+ev)) {
				events[t][ev] = true
			}
		}
	}); err != nil {
		return s, err
	}
	for t, evs := range events {
		for ev := range evs {
			s.Triggers[t] = append(s.Triggers[t], ev)
		}
		sort.Strings(s.Triggers[t])
	}
	for t := range s.Columns {
		sort.Strings(s.Columns[t])
	}
	return s, nil
}

// CurrentRoleForTest reads the role the session runs as (PostgreSQL).
func CurrentRoleForTest(ctx context.Context, q *Queries, role *string) error {
	return q.queryRow(ctx, `SELECT current_user`).Scan(role)
}

// The metering reads, for their query plans.
const (
	AllocationIntervalsSinceQueryForTest = allocationIntervalsSinceQuery
	InstanceStatusChangesQueryForTest    = instanceStatusChangesQuery
)

// QueryPlanForTest returns the plan of query: EXPLAIN QUERY PLAN on
// SQLite; on PostgreSQL EXPLAIN with sequential scans priced out, so the
// plan shows whether an index can serve the query at all (on a small
// table a scan is cheaper, whatever the indexes).
func QueryPlanForTest(ctx context.Context, db *DB, query string, args ...any) (string, error) {
	var lines []string
	err := db.InTx(ctx, func(q *Queries) error {
		explain := `EXPLAIN QUERY PLAN `
		if db.dialect == Postgres {
			if _, err := q.exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
				return err
			}
			explain = `EXPLAIN `
		}
		rows, err := q.query(ctx, explain+query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if db.dialect == Postgres {
				var line string
				if err := rows.Scan(&line); err != nil {
					return err
				}
				lines = append(lines, line)
				continue
			}
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				return err
			}
			lines = append(lines, detail)
		}
		return rows.Err()
	})
	return strings.Join(lines, "\n"), err
}

// PruneAuditQueryForTest is one batch of PruneAudit on d, for its plan.
func PruneAuditQueryForTest(d Dialect, batch int) string { return pruneAuditQuery(d, batch) }
