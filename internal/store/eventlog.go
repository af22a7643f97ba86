package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/gpuaas/gpuaas/internal/events"
)

// The event log: the relay's queries over outbox_events (sequencing,
// publishing, retention, its lease) and the reads the event API serves.
// The ordering they keep is described in internal/events (storage.go).

// ErrLeaseLost is returned by SequenceEvents when holder no longer holds the
// relay lease (it expired and another replica took it over).
var ErrLeaseLost = events.ErrLeaseLost

var _ events.Queries = (*Queries)(nil)

// EventLog is the events domain's storage: the outbox as the relay, the
// retention worker and the reader use it.
func EventLog(db *DB) events.Log { return eventLog{db} }

type eventLog struct{ db *DB }

func (l eventLog) Read() events.Queries { return l.db.Queries() }

func (l eventLog) SequenceEvents(ctx context.Context, lease, holder string, now time.Time, limit int) (int, int64, error) {
	return l.db.SequenceEvents(ctx, lease, holder, now, limit)
}

// AcquireLease takes or renews the named lease for holder until now+ttl. It
// reports whether holder holds it afterwards; an unexpired lease of another
// holder is left alone.
func (q *Queries) AcquireLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	res, err := q.exec(ctx, `INSERT INTO event_relay_leases (name, holder, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE event_relay_leases.holder = excluded.holder OR event_relay_leases.expires_at < ?`,
		name, holder, ts(now.Add(ttl)), ts(now))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ReleaseLease gives the lease up (a clean shutdown), so a successor need
// not wait for it to expire.
func (q *Queries) ReleaseLease(ctx context.Context, name, holder string) error {
	_, err := q.exec(ctx, `DELETE FROM event_relay_leases WHERE name = ? AND holder = ?`, name, holder)
	return err
}

// LeaseHolder reports who holds the named lease and until when.
func (q *Queries) LeaseHolder(ctx context.Context, name string) (string, time.Time, error) {
	var holder string
	var until time.Time
	err := q.queryRow(ctx, `SELECT holder, expires_at FROM event_relay_leases WHERE name = ?`, name).Scan(&holder, scanTime(&until))
	return holder, until, scanOne(err)
}

// SequenceEvents gives up to limit visible unsequenced rows their positions,
// in id order, if holder still holds the lease. It returns how many rows it
// sequenced and the highest position now assigned.
func (db *DB) SequenceEvents(ctx context.Context, lease, holder string, now time.Time, limit int) (int, int64, error) {
	var n int64
	var head int64
	err := db.InTx(ctx, func(q *Queries) error {
		// Locks the lease row (PostgreSQL; SQLite serialises writers anyway)
		// so sequencing passes never overlap, even across a takeover.
		res, err := q.exec(ctx, `UPDATE event_relay_leases SET holder = holder WHERE name = ? AND holder = ? AND expires_at >= ?`, lease, holder, ts(now))
		if err != nil {
			return err
		}
		if k, _ := res.RowsAffected(); k != 1 {
			return ErrLeaseLost
		}
		if err := q.queryRow(ctx, `SELECT COALESCE(MAX(position), 0) FROM outbox_events`).Scan(&head); err != nil {
			return mapErr(err)
		}
		res, err = q.exec(ctx, `UPDATE outbox_events SET position = ? + s.rn
			FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS rn FROM outbox_events WHERE position IS NULL ORDER BY id LIMIT ?) AS s
			WHERE outbox_events.id = s.id`, head, limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		head += n
		return err
	})
	return int(n), head, err
}

// HasUnsequencedEvents reports whether committed rows wait for a position:
// a cheap read that spares an idle relay pass its write transaction.
func (q *Queries) HasUnsequencedEvents(ctx context.Context) (bool, error) {
	var one int
	err := q.queryRow(ctx, `SELECT 1 FROM outbox_events WHERE position IS NULL LIMIT 1`).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, mapErr(err)
}

// UnpublishedEvents returns sequenced rows the bus has not acknowledged,
// in position order.
func (q *Queries) UnpublishedEvents(ctx context.Context, limit int) ([]Event, error) {
	rows, err := q.query(ctx, `SELECT `+eventReadCols+` FROM outbox_events
		WHERE published_at IS NULL AND position IS NOT NULL ORDER BY position LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanEvent)
}

// MarkPublished records the bus's acknowledgement of every row up to and
// including position upTo.
func (q *Queries) MarkPublished(ctx context.Context, upTo int64, at time.Time) error {
	_, err := q.exec(ctx, `UPDATE outbox_events SET published_at = ?
		WHERE published_at IS NULL AND position IS NOT NULL AND position <= ?`, ts(at), upTo)
	return err
}

// UnmarkPublished makes rows acknowledged at or after since unpublished
// again, so the relay sends them once more. A new relay leader does this for
// a short window: whatever the bus had not yet made durable when the old
// leader (or an embedded NATS with it) died is restored, and what it did
// keep is dropped by JetStream's duplicate window (same Nats-Msg-Id).
func (q *Queries) UnmarkPublished(ctx context.Context, since time.Time) (int64, error) {
	res, err := q.exec(ctx, `UPDATE outbox_events SET published_at = NULL WHERE published_at >= ? AND parked_reason = ''`, ts(since))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// ParkEvent marks the unpublished row at position as handled without the
// bus, with the reason the bus refused it: the relay goes on behind it.
// Parked rows are never requeued; retention prunes them like the rest.
func (q *Queries) ParkEvent(ctx context.Context, position int64, reason events.ParkReason, at time.Time) error {
	return q.execOne(ctx, `UPDATE outbox_events SET published_at = ?, parked_reason = ?
		WHERE position = ? AND published_at IS NULL`, ts(at), string(reason), position)
}

// ListParkedEvents pages through parked events, oldest first.
func (q *Queries) ListParkedEvents(ctx context.Context, p Page) ([]events.ParkedEvent, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+eventReadCols+`, parked_reason, published_at FROM outbox_events
		WHERE parked_reason <> '' AND id > ? ORDER BY id`+limitClause(limit), after)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, func(r interface{ Scan(...any) error }) (events.ParkedEvent, error) {
		var e events.ParkedEvent
		var pos sql.NullInt64
		var reason string
		err := r.Scan(&e.ID, &e.Source, &e.Type, &e.Subject, scanTime(&e.Time), &e.OrgID, &e.ProjectID, &e.Actor,
			&e.CorrelationID, scanJSON(&e.Data), &pos, &reason, scanTime(&e.ParkedAt))
		e.Position, e.Reason = pos.Int64, events.ParkReason(reason)
		return e, err
	})
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(e events.ParkedEvent) string { return e.ID })
	return out, next, nil
}

// ParkedEventCounts counts parked events by reason.
func (q *Queries) ParkedEventCounts(ctx context.Context) (map[string]int64, error) {
	rows, err := q.query(ctx, `SELECT parked_reason, COUNT(*) FROM outbox_events WHERE parked_reason <> '' GROUP BY parked_reason`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var reason string
		var n int64
		if err := rows.Scan(&reason, &n); err != nil {
			return nil, err
		}
		out[reason] = n
	}
	return out, rows.Err()
}

// RequeueEvents marks the published rows at positions >= from unpublished,
// so the relay sends them to the bus again, in order, with their ids as
// Nats-Msg-Id (the operator's republish; docs/events.md). Returns how many.
func (q *Queries) RequeueEvents(ctx context.Context, from int64) (int64, error) {
	res, err := q.exec(ctx, `UPDATE outbox_events SET published_at = NULL WHERE position >= ? AND published_at IS NOT NULL AND parked_reason = ''`, from)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// PruneEvents deletes rows the bus acknowledged before cutoff, keeping the
// retained rows a suffix of the positions (so a resume point is either
// retained or provably expired) and always keeping the newest row (it
// carries the position counter). It returns how many rows it deleted.
func (q *Queries) PruneEvents(ctx context.Context, cutoff time.Time) (int64, error) {
	res, err := q.exec(ctx, `DELETE FROM outbox_events WHERE position IS NOT NULL
		AND position < (SELECT MAX(position) FROM outbox_events)
		AND position <= (SELECT COALESCE(MAX(position), 0) FROM outbox_events WHERE published_at IS NOT NULL AND published_at < ?)
		AND position < (SELECT COALESCE(MIN(position), 9223372036854775807) FROM outbox_events WHERE published_at IS NULL AND position IS NOT NULL)`,
		ts(cutoff))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// EventBounds returns the oldest and newest retained positions (0, 0 when
// nothing is sequenced yet).
func (q *Queries) EventBounds(ctx context.Context) (oldest, newest int64, err error) {
	err = q.queryRow(ctx, `SELECT COALESCE(MIN(position), 0), COALESCE(MAX(position), 0) FROM outbox_events WHERE position IS NOT NULL`).Scan(&oldest, &newest)
	return oldest, newest, mapErr(err)
}

// EventPosition returns the position of the sequenced event with id.
func (q *Queries) EventPosition(ctx context.Context, id string) (int64, error) {
	var p sql.NullInt64
	err := q.queryRow(ctx, `SELECT position FROM outbox_events WHERE id = ?`, id).Scan(&p)
	if err = scanOne(err); err != nil {
		return 0, err
	}
	if !p.Valid {
		return 0, ErrNotFound
	}
	return p.Int64, nil
}

// ListEvents returns up to limit sequenced events after position `after`
// that match f, in position order. A project's events (f.ProjectID) are its
// own and the apps.instance.* events of the shared instances attached to it
// now; an org's (f.OrgID alone) are its own and those of the shared
// instances attached to any of its projects now, which for a
// platform-managed instance of another org are not its own rows
// (events.EventFilter). Either is two index-ordered reads (by project or
// org, and outbox_events_subject), each cut at limit, merged by position.
func (q *Queries) ListEvents(ctx context.Context, f events.EventFilter, after int64, limit int) ([]Event, error) {
	var conds string
	var args []any
	add := func(cond string, v ...any) { conds += " AND " + cond; args = append(args, v...) }
	if f.TypePrefix != "" {
		// A prefix match without LIKE, whose wildcards '_' and '%' appear in
		// type names: compare the leading characters.
		add("SUBSTR(type, 1, ?) = ?", len(f.TypePrefix), f.TypePrefix)
	}
	if f.Subject != "" {
		add("subject = ?", f.Subject)
	}
	if err := addTimeBounds(func(c string, v any) { add(c, v) },
		timeBound{"since", "occurred_at >= ?", f.Since}, timeBound{"until", "occurred_at < ?", f.Until}); err != nil {
		return nil, err
	}
	var query string
	var all []any
	switch {
	case f.ProjectID == "" && f.OrgID == "":
		query = `SELECT ` + eventReadCols + ` FROM outbox_events WHERE position IS NOT NULL AND position > ?` + conds + ` ORDER BY position LIMIT ?`
		all = append(append([]any{after}, args...), limit)
	case f.ProjectID == "":
		// The org's own rows, and the attached instances' rows of other
		// orgs (a tenant-shared instance's are the org's own already).
		query, all = withAttached(`org_id = ?`, []any{f.OrgID}, `org_id = ?`, f.OrgID, `org_id <> ?`, f.OrgID,
			`audience IN (SELECT id FROM projects WHERE org_id = ?)`, f.OrgID, after, conds, args, limit)
	default:
		own, ownArgs := `project_id = ?`, []any{f.ProjectID}
		if f.OrgID != "" {
			own, ownArgs = own+" AND org_id = ?", append(ownArgs, f.OrgID)
		}
		// The attachment names the project, whatever its org (a
		// platform-managed instance is attached across orgs); the home
		// project's rows are the first branch's.
		query, all = withAttached(own, ownArgs, `project_id = ?`, f.ProjectID, `project_id <> ?`, f.ProjectID,
			`audience = ?`, f.ProjectID, after, conds, args, limit)
	}
	rows, err := q.query(ctx, query, all...)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanEvent)
}

// withAttached builds ListEvents' read of a scope: the rows matching own
// (the scope's own events), and the AttachedTypePrefix rows of the
// instances whose app_instance_attachments row matches attached, less the
// rows the first branch has (notOwn) and the rows about another tenant's
// attachment (an audience, not matching audience), both after position
// after and matching conds, merged by position.
func withAttached(own string, ownArgs []any, attached string, attachedArg any, notOwn string, notOwnArg any,
	audience string, audienceArg any, after int64, conds string, args []any, limit int) (string, []any) {
	ownQ := `SELECT ` + eventReadCols + ` FROM outbox_events WHERE ` + own + ` AND position IS NOT NULL AND position > ?`
	shared := `SELECT ` + eventReadCols + ` FROM outbox_events
			WHERE subject IN (SELECT 'app-instances/' || instance_id FROM app_instance_attachments WHERE ` + attached + `)
			AND SUBSTR(type, 1, ?) = ? AND ` + notOwn + ` AND (audience = '' OR ` + audience + `)
			AND position IS NOT NULL AND position > ?`
	query := `SELECT * FROM (` + ownQ + conds + ` ORDER BY position LIMIT ?) AS own
			UNION ALL SELECT * FROM (` + shared + conds + ` ORDER BY position LIMIT ?) AS shared
			ORDER BY position LIMIT ?`
	all := append(append(append(ownArgs, after), args...), limit, attachedArg, len(events.AttachedTypePrefix), events.AttachedTypePrefix, notOwnArg, audienceArg, after)
	all = append(append(all, args...), limit, limit)
	return query, all
}

// AllEvents returns every outbox row, sequenced or not, in id order: the
// test suite's contract check reads it at cleanup.
func (q *Queries) AllEvents(ctx context.Context) ([]Event, error) {
	rows, err := q.query(ctx, `SELECT `+eventReadCols+` FROM outbox_events ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return collect(rows, scanEvent)
}

const eventReadCols = eventCols + `, position`

func scanEvent(r interface{ Scan(...any) error }) (Event, error) {
	var e Event
	var pos sql.NullInt64
	err := r.Scan(&e.ID, &e.Source, &e.Type, &e.Subject, scanTime(&e.Time), &e.OrgID, &e.ProjectID, &e.Actor,
		&e.CorrelationID, scanJSON(&e.Data), &pos)
	e.Position = pos.Int64
	return e, mapErr(err)
}
