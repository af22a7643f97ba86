package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/billing"
)

var (
	_ billing.Tx      = (*Tx)(nil)
	_ billing.Queries = (*Queries)(nil)
)

// Billing is the billing domain's storage.
func Billing(db *DB) billing.Store { return NewPort[billing.Tx, billing.Queries](db) }

const usageCols = `id, dedupe_key, org_id, project_id, app_instance_id, allocation_id, app_slug, operating_mode,
 control_plane_scope, runtime_backend, correlation_id, usage_source, usage_unit, quantity, sku, meter,
 start_time, end_time, event_source, event_id, recorded_at`

const usageColCount = 21

func scanUsage(s interface{ Scan(...any) error }) (billing.UsageRecord, error) {
	var u billing.UsageRecord
	err := s.Scan(usageDests(&u)...)
	return u, err
}

// usageDests are the scan destinations of usageCols, in order.
func usageDests(u *billing.UsageRecord) []any {
	return []any{&u.ID, &u.DedupeKey, &u.OrgID, &u.ProjectID, &u.AppInstanceID, &u.AllocationID, &u.AppSlug,
		&u.OperatingMode, &u.ControlPlaneScope, &u.RuntimeBackend, &u.CorrelationID, &u.UsageSource, &u.UsageUnit,
		&u.Quantity, &u.SKU, &u.Meter, scanTime(&u.StartTime), scanTime(&u.EndTime), &u.EventSource, &u.EventID,
		scanTime(&u.RecordedAt)}
}

func usageArgs(u billing.UsageRecord) []any {
	return []any{u.ID, u.DedupeKey, u.OrgID, u.ProjectID, u.AppInstanceID, u.AllocationID, u.AppSlug, u.OperatingMode,
		u.ControlPlaneScope, u.RuntimeBackend, u.CorrelationID, u.UsageSource, u.UsageUnit, u.Quantity, u.SKU, u.Meter,
		ts(u.StartTime), ts(u.EndTime), u.EventSource, u.EventID, ts(u.RecordedAt)}
}

// usageInsertChunk keeps one statement under both dialects' limits on bound
// parameters (SQLite 32766, PostgreSQL 65535).
const usageInsertChunk = 500

// InsertUsageRecords stores the records whose dedupe keys are new and
// returns the ids of those it stored; records whose key is already present
// (earlier, or earlier in the same slice) are duplicates and skipped. It is
// a few multi-row statements, not one per record, so a batch of events costs
// about as much as a batch of plain inserts. The ids must be fresh: when a
// chunk had duplicates, the stored ones are found by id.
//
// Rows are inserted in dedupe-key order: concurrent batches with keys in
// common then take the unique index's keys in the same order and wait on
// each other instead of deadlocking (PostgreSQL).
func (q *Queries) InsertUsageRecords(ctx context.Context, recs []billing.UsageRecord) (map[string]bool, error) {
	recs = slices.Clone(recs)
	slices.SortStableFunc(recs, func(a, b billing.UsageRecord) int { return strings.Compare(a.DedupeKey, b.DedupeKey) })
	stored := make(map[string]bool, len(recs))
	for start := 0; start < len(recs); start += usageInsertChunk {
		chunk := recs[start:min(start+usageInsertChunk, len(recs))]
		ids := make([]string, len(chunk))
		for i, u := range chunk {
			ids[i] = u.ID
		}
		if err := q.insertSkippingConflicts(ctx, usageInsert(chunk, true), usageChunkArgs(chunk), "usage_records", ids, stored); err != nil {
			return nil, err
		}
	}
	return stored, nil
}

// UsageKeyOwners returns the app instance of the record stored under each
// of keys that one is stored under.
func (q *Queries) UsageKeyOwners(ctx context.Context, keys []string) (map[string]string, error) {
	return q.keyOwners(ctx, "usage_records", "app_instance_id", keys)
}

// keyOwners returns ownerCol of the row of table stored under each of keys
// (its dedupe_key) that one is stored under.
func (q *Queries) keyOwners(ctx context.Context, table, ownerCol string, keys []string) (map[string]string, error) {
	out := make(map[string]string, len(keys))
	for chunk := range slices.Chunk(keys, usageInsertChunk) {
		args := make([]any, len(chunk))
		for i, k := range chunk {
			args[i] = k
		}
		rows, err := q.query(ctx, `SELECT dedupe_key, `+ownerCol+` FROM `+table+` WHERE dedupe_key IN (`+placeholders(len(chunk))+`)`, args...)
		if err != nil {
			return nil, err
		}
		owners, err := collect(rows, func(s interface{ Scan(...any) error }) ([2]string, error) {
			var o [2]string
			return o, s.Scan(&o[0], &o[1])
		})
		if err != nil {
			return nil, err
		}
		for _, o := range owners {
			out[o[0]] = o[1]
		}
	}
	return out, nil
}

// dequeueUnrated takes a charged record off the rater's queue.
func (q *Queries) dequeueUnrated(ctx context.Context, usageRecordID string) error {
	_, err := q.exec(ctx, `DELETE FROM usage_unrated WHERE usage_record_id = ?`, usageRecordID)
	return err
}

// insertSkippingConflicts runs one multi-row INSERT … ON CONFLICT DO
// NOTHING of the rows whose ids are ids into table, and marks in stored the
// ids it wrote: every one when the row count says nothing conflicted (the
// common case), else those the table holds afterwards.
func (q *Queries) insertSkippingConflicts(ctx context.Context, insert string, args []any, table string, ids []string, stored map[string]bool) error {
	res, err := q.exec(ctx, insert, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return mapErr(err)
	}
	if int(n) == len(ids) {
		for _, id := range ids {
			stored[id] = true
		}
		return nil
	}
	anyIDs := make([]any, len(ids))
	for i, id := range ids {
		anyIDs[i] = id
	}
	rows, err := q.query(ctx, `SELECT id FROM `+table+` WHERE id IN (`+placeholders(len(ids))+`)`, anyIDs...)
	if err != nil {
		return err
	}
	written, err := collect(rows, func(s interface{ Scan(...any) error }) (string, error) {
		var id string
		return id, s.Scan(&id)
	})
	for _, id := range written {
		stored[id] = true
	}
	return err
}

// usageInsert is one multi-row INSERT of chunk; dedupe skips rows whose
// dedupe key exists.
func usageInsert(chunk []billing.UsageRecord, dedupe bool) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO usage_records (` + usageCols + `) VALUES `)
	row := "(" + placeholders(usageColCount) + ")"
	for i := range chunk {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	if dedupe {
		b.WriteString(` ON CONFLICT (dedupe_key) DO NOTHING`)
	}
	return b.String()
}

func usageChunkArgs(chunk []billing.UsageRecord) []any {
	args := make([]any, 0, len(chunk)*usageColCount)
	for _, u := range chunk {
		args = append(args, usageArgs(u)...)
	}
	return args
}

// InsertUsageRecordsPlain inserts records with no dedupe at all: the raw
// insert rate benchmarks compare the deduplicating path against.
func (q *Queries) InsertUsageRecordsPlain(ctx context.Context, recs []billing.UsageRecord) error {
	for start := 0; start < len(recs); start += usageInsertChunk {
		chunk := recs[start:min(start+usageInsertChunk, len(recs))]
		if _, err := q.exec(ctx, usageInsert(chunk, false), usageChunkArgs(chunk)...); err != nil {
			return err
		}
	}
	return nil
}

// GetUsageByDedupeKey returns the record stored under key.
func (q *Queries) GetUsageByDedupeKey(ctx context.Context, key string) (billing.UsageRecord, error) {
	u, err := scanUsage(q.queryRow(ctx, `SELECT `+usageCols+` FROM usage_records WHERE dedupe_key = ?`, key))
	return u, scanOne(err)
}

// usageWhere is the WHERE clause of f, on timeCol as the usage time.
func usageWhere(f billing.UsageFilter, timeCol string) (string, []any, error) {
	var (
		conds []string
		args  []any
	)
	add := func(cond string, v ...any) { conds = append(conds, cond); args = append(args, v...) }
	for _, c := range []struct{ col, v string }{
		{"org_id", f.OrgID}, {"project_id", f.ProjectID}, {"app_instance_id", f.AppInstanceID},
		{"usage_source", f.UsageSource}, {"usage_unit", f.UsageUnit},
	} {
		if c.v != "" {
			add(c.col+" = ?", c.v)
		}
	}
	if f.ProjectIDs != nil {
		if len(f.ProjectIDs) == 0 {
			add("1 = 0")
		} else {
			ph := placeholders(len(f.ProjectIDs))
			vs := make([]any, len(f.ProjectIDs))
			for i, p := range f.ProjectIDs {
				vs[i] = p
			}
			add("project_id IN ("+ph+")", vs...)
		}
	}
	if err := addTimeBounds(func(c string, v any) { add(c, v) },
		timeBound{"from", timeCol + " >= ?", f.From}, timeBound{"to", timeCol + " < ?", f.To}); err != nil {
		return "", nil, err
	}
	if len(conds) == 0 {
		return "", nil, nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args, nil
}

// ListUsage returns usage records in id (recording) order.
func (q *Queries) ListUsage(ctx context.Context, f billing.UsageFilter, p Page) ([]billing.UsageRecord, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	where, args, err := usageWhere(f, "start_time")
	if err != nil {
		return nil, "", err
	}
	if after != "" {
		where = andWhere(where, "id > ?")
		args = append(args, after)
	}
	rows, err := q.query(ctx, `SELECT `+usageCols+` FROM usage_records`+where+` ORDER BY id`+limitClause(limit), args...)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanUsage)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(u billing.UsageRecord) string { return u.ID })
	return out, next, nil
}

func andWhere(where, cond string) string {
	if where == "" {
		return " WHERE " + cond
	}
	return where + " AND " + cond
}

// GroupUsage sums quantities per distinct value of the columns in by (each
// one of billing.UsageGroupColumns; the caller checks). usage_unit is always part of
// the grouping: quantities of different units never add up.
func (q *Queries) GroupUsage(ctx context.Context, f billing.UsageFilter, by []string) ([]billing.UsageGroup, error) {
	by = withColumn(by, "usage_unit")
	cols := strings.Join(by, ", ")
	where, args, err := usageWhere(f, "start_time")
	if err != nil {
		return nil, err
	}
	rows, err := q.query(ctx, `SELECT `+cols+`, `+exactSum("quantity")+`, COUNT(*) FROM usage_records`+where+
		` GROUP BY `+cols+` ORDER BY `+cols, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (billing.UsageGroup, error) {
		vals := make([]string, len(by))
		dst := make([]any, 0, len(by)+2)
		for i := range vals {
			dst = append(dst, &vals[i])
		}
		var (
			g   billing.UsageGroup
			sum bigSum
		)
		dst = append(append(dst, sum.dests()...), &g.Records)
		if err := s.Scan(dst...); err != nil {
			return g, err
		}
		g.Quantity = sum.value()
		g.Keys = make(map[string]string, len(by))
		for i, c := range by {
			g.Keys[c] = vals[i]
		}
		return g, nil
	})
}

func withColumn(by []string, col string) []string {
	for _, c := range by {
		if c == col {
			return by
		}
	}
	return append(append([]string(nil), by...), col)
}

// unratedFrom reads the rater's queue: the records with no charge yet.
// The ledger stays the truth (unratedWhere): a queue row whose record was
// charged by a path that did not take it off is passed over.
const unratedFrom = ` FROM usage_unrated w JOIN usage_records u ON u.id = w.usage_record_id`

const unratedWhere = ` NOT EXISTS (SELECT 1 FROM ledger_entries l WHERE l.usage_record_id = u.id AND l.entry_type = 'charge')`

// usageColsU are the usage columns of the alias u.
var usageColsU = prefixed("u.", usageCols)

// unratedWindowQuery finds where the next window of the rater's queue
// ends: at most limit ids after the cursor, read from the queue's own key.
const unratedWindowQuery = `SELECT COUNT(*), COALESCE(MAX(usage_record_id), '') FROM
 (SELECT usage_record_id FROM usage_unrated WHERE usage_record_id > ? ORDER BY usage_record_id LIMIT %d) w`

// unratedUsageQuery reads the records of one window of the queue. The
// window's bounds are given on both sides of the join, so the planner
// reads a range of each key rather than hashing all of usage_records,
// which holds every record ever stored.
var unratedUsageQuery = `SELECT ` + usageColsU + ` FROM usage_unrated w JOIN usage_records u ON u.id = w.usage_record_id
 WHERE w.usage_record_id > ? AND w.usage_record_id <= ? AND u.id > ? AND u.id <= ? AND` + unratedWhere + `
 AND NOT EXISTS (SELECT 1 FROM billing_parked_usage p WHERE p.usage_record_id = u.id)
 ORDER BY w.usage_record_id`

// UnratedUsage reads the next limit entries of the rating queue after
// afterID (in id order) and returns those records that have no charge in
// the ledger yet and are not parked, with the cursor to read on from (""
// once the queue is read to its end). The queue is read a window at a
// time, not filtered to a page of records: records waiting for a price
// and parked ones stay queued, and a pass that asked each batch for the
// next limit rateable records would read all of those again per batch.
func (q *Queries) UnratedUsage(ctx context.Context, afterID string, limit int) ([]billing.UsageRecord, string, error) {
	var n int
	var end string
	if err := q.queryRow(ctx, fmt.Sprintf(unratedWindowQuery, limit), afterID).Scan(&n, &end); err != nil {
		return nil, "", mapErr(err)
	}
	if n == 0 {
		return nil, "", nil
	}
	rows, err := q.query(ctx, unratedUsageQuery, afterID, end, afterID, end)
	if err != nil {
		return nil, "", err
	}
	recs, err := collect(rows, scanUsage)
	if err != nil || n < limit {
		return recs, "", err
	}
	return recs, end, nil
}

// ParkUsage sets a usage record aside so rating skips it, and reports
// whether this call parked it (a record is parked once).
func (q *Queries) ParkUsage(ctx context.Context, p billing.ParkedUsage) (bool, error) {
	res, err := q.exec(ctx, `INSERT INTO billing_parked_usage (usage_record_id, org_id, project_id, reason, detail, parked_at)
 VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (usage_record_id) DO NOTHING`,
		p.UsageRecordID, p.OrgID, p.ProjectID, p.Reason, p.Detail, ts(p.ParkedAt))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ListUnratedUsage pages through every usage record that has no charge,
// parked or not, in id order.
func (q *Queries) ListUnratedUsage(ctx context.Context, p Page) ([]billing.UnratedRow, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+usageColsU+`, COALESCE(p.reason, ''), COALESCE(p.detail, ''), p.parked_at`+unratedFrom+`
 LEFT JOIN billing_parked_usage p ON p.usage_record_id = u.id
 WHERE w.usage_record_id > ? AND`+unratedWhere+` ORDER BY w.usage_record_id`+limitClause(limit), after)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, func(s interface{ Scan(...any) error }) (billing.UnratedRow, error) {
		var r billing.UnratedRow
		u := &r.Record
		err := s.Scan(append(usageDests(u), &r.Parked.Reason, &r.Parked.Detail, scanTime(&r.Parked.ParkedAt))...)
		if r.Parked.Reason != "" {
			r.Parked.UsageRecordID, r.Parked.OrgID, r.Parked.ProjectID = u.ID, u.OrgID, u.ProjectID
		}
		return r, err
	})
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(r billing.UnratedRow) string { return r.Record.ID })
	return out, next, nil
}

// CountParkedUsage counts parked usage records by reason.
func (q *Queries) CountParkedUsage(ctx context.Context) (map[string]int64, error) {
	rows, err := q.query(ctx, `SELECT reason, COUNT(*) FROM billing_parked_usage GROUP BY reason`)
	if err != nil {
		return nil, err
	}
	type row struct {
		reason string
		n      int64
	}
	rs, err := collect(rows, func(s interface{ Scan(...any) error }) (row, error) {
		var r row
		return r, s.Scan(&r.reason, &r.n)
	})
	out := make(map[string]int64, len(rs))
	for _, r := range rs {
		out[r.reason] = r.n
	}
	return out, err
}

func prefixed(p, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

const priceCols = `id, usage_source, sku, meter, usage_unit, version, unit_price_micros, per_quantity, currency, effective_from, note, created_by, created_at`

func scanPrice(s interface{ Scan(...any) error }) (billing.Price, error) {
	var p billing.Price
	err := s.Scan(&p.ID, &p.UsageSource, &p.SKU, &p.Meter, &p.UsageUnit, &p.Version, &p.UnitPriceMicros, &p.PerQuantity,
		&p.Currency, scanTime(&p.EffectiveFrom), &p.Note, &p.CreatedBy, scanTime(&p.CreatedAt))
	return p, err
}

// InsertPrice stores a price version; Version must be the next one for its
// sku or meter (the unique key refuses a race between two admins).
func (q *Queries) InsertPrice(ctx context.Context, p billing.Price) error {
	_, err := q.exec(ctx, `INSERT INTO billing_prices (`+priceCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		p.ID, p.UsageSource, p.SKU, p.Meter, p.UsageUnit, p.Version, p.UnitPriceMicros, p.PerQuantity, p.Currency,
		ts(p.EffectiveFrom), p.Note, p.CreatedBy, ts(p.CreatedAt))
	return err
}

// LatestPriceVersion returns the highest version of a sku or meter, 0 if none.
func (q *Queries) LatestPriceVersion(ctx context.Context, source, sku, meter string) (int, error) {
	var v int
	err := q.queryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM billing_prices WHERE usage_source = ? AND sku = ? AND meter = ?`,
		source, sku, meter).Scan(&v)
	return v, mapErr(err)
}

// PriceAt returns the price of a sku or meter in effect at t: the newest
// version effective at or before t.
func (q *Queries) PriceAt(ctx context.Context, source, sku, meter string, t time.Time) (billing.Price, error) {
	p, err := scanPrice(q.queryRow(ctx, `SELECT `+priceCols+` FROM billing_prices
 WHERE usage_source = ? AND sku = ? AND meter = ? AND effective_from <= ?
 ORDER BY effective_from DESC, version DESC LIMIT 1`, source, sku, meter, ts(t)))
	return p, scanOne(err)
}

// GetPrice returns one price version by id.
func (q *Queries) GetPrice(ctx context.Context, id string) (billing.Price, error) {
	p, err := scanPrice(q.queryRow(ctx, `SELECT `+priceCols+` FROM billing_prices WHERE id = ?`, id))
	return p, scanOne(err)
}

// ListPrices lists every price version in creation order.
func (q *Queries) ListPrices(ctx context.Context, p Page) ([]billing.Price, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	rows, err := q.query(ctx, `SELECT `+priceCols+` FROM billing_prices WHERE id > ? ORDER BY id`+limitClause(limit), after)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanPrice)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(p billing.Price) string { return p.ID })
	return out, next, nil
}

const ledgerCols = `id, org_id, project_id, entry_type, usage_record_id, corrects_entry_id, app_instance_id, usage_source,
 usage_unit, sku, meter, quantity, price_id, unit_price_micros, per_quantity, amount_micros, currency, reason, usage_time,
 created_by, created_at`

func scanLedger(s interface{ Scan(...any) error }) (billing.LedgerEntry, error) {
	var (
		e                        billing.LedgerEntry
		usage, corrects, priceID sql.NullString
	)
	err := s.Scan(&e.ID, &e.OrgID, &e.ProjectID, &e.EntryType, &usage, &corrects, &e.AppInstanceID, &e.UsageSource,
		&e.UsageUnit, &e.SKU, &e.Meter, &e.Quantity, &priceID, &e.UnitPriceMicros, &e.PerQuantity, &e.AmountMicros,
		&e.Currency, &e.Reason, scanTime(&e.UsageTime), &e.CreatedBy, scanTime(&e.CreatedAt))
	e.UsageRecordID, e.CorrectsEntryID, e.PriceID = usage.String, corrects.String, priceID.String
	return e, err
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// InsertLedgerEntry appends one entry. A second charge for the same usage
// record is refused with ErrAlreadyExists.
func (q *Queries) InsertLedgerEntry(ctx context.Context, e billing.LedgerEntry) error {
	_, err := q.exec(ctx, `INSERT INTO ledger_entries (`+ledgerCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.ID, e.OrgID, e.ProjectID, e.EntryType, nullStr(e.UsageRecordID), nullStr(e.CorrectsEntryID), e.AppInstanceID,
		e.UsageSource, e.UsageUnit, e.SKU, e.Meter, e.Quantity, nullStr(e.PriceID), e.UnitPriceMicros, e.PerQuantity,
		e.AmountMicros, e.Currency, e.Reason, ts(e.UsageTime), e.CreatedBy, ts(e.CreatedAt))
	if err != nil || e.EntryType != billing.EntryCharge || e.UsageRecordID == "" {
		return err
	}
	return q.dequeueUnrated(ctx, e.UsageRecordID)
}

// InsertCharge appends a charge unless the usage record already has one,
// and reports whether it did: two raters racing on one record charge it
// once, and the loser's transaction stays usable.
func (q *Queries) InsertCharge(ctx context.Context, e billing.LedgerEntry) (bool, error) {
	res, err := q.exec(ctx, `INSERT INTO ledger_entries (`+ledgerCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
 ON CONFLICT (usage_record_id) WHERE entry_type = 'charge' DO NOTHING`,
		e.ID, e.OrgID, e.ProjectID, billing.EntryCharge, e.UsageRecordID, nil, e.AppInstanceID,
		e.UsageSource, e.UsageUnit, e.SKU, e.Meter, e.Quantity, nullStr(e.PriceID), e.UnitPriceMicros, e.PerQuantity,
		e.AmountMicros, e.Currency, e.Reason, ts(e.UsageTime), e.CreatedBy, ts(e.CreatedAt))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	// Charged now or before: either way off the queue.
	return n == 1, q.dequeueUnrated(ctx, e.UsageRecordID)
}

// GetLedgerEntry returns one entry by id.
func (q *Queries) GetLedgerEntry(ctx context.Context, id string) (billing.LedgerEntry, error) {
	e, err := scanLedger(q.queryRow(ctx, `SELECT `+ledgerCols+` FROM ledger_entries WHERE id = ?`, id))
	return e, scanOne(err)
}

// ListLedger returns entries in posting order.
func (q *Queries) ListLedger(ctx context.Context, f billing.UsageFilter, p Page) ([]billing.LedgerEntry, string, error) {
	after, limit, err := p.AfterID()
	if err != nil {
		return nil, "", err
	}
	where, args, err := usageWhere(f, "usage_time")
	if err != nil {
		return nil, "", err
	}
	if after != "" {
		where = andWhere(where, "id > ?")
		args = append(args, after)
	}
	rows, err := q.query(ctx, `SELECT `+ledgerCols+` FROM ledger_entries`+where+` ORDER BY id`+limitClause(limit), args...)
	if err != nil {
		return nil, "", err
	}
	out, err := collect(rows, scanLedger)
	if err != nil {
		return nil, "", err
	}
	out, next := trimPage(out, limit, func(e billing.LedgerEntry) string { return e.ID })
	return out, next, nil
}

// GroupLedger sums amounts per currency and per distinct value of the
// columns in by (each one of billing.LedgerGroupColumns; the caller checks). With
// no columns it is the balance: the sum of every matching entry.
func (q *Queries) GroupLedger(ctx context.Context, f billing.UsageFilter, by []string) ([]billing.LedgerGroup, error) {
	by = withColumn(by, "currency")
	cols := strings.Join(by, ", ")
	where, args, err := usageWhere(f, "usage_time")
	if err != nil {
		return nil, err
	}
	rows, err := q.query(ctx, `SELECT `+cols+`, `+exactSum("amount_micros")+`, COUNT(*) FROM ledger_entries`+where+
		` GROUP BY `+cols+` ORDER BY `+cols, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (billing.LedgerGroup, error) {
		vals := make([]string, len(by))
		dst := make([]any, 0, len(by)+2)
		for i := range vals {
			dst = append(dst, &vals[i])
		}
		var (
			g   billing.LedgerGroup
			sum bigSum
		)
		dst = append(append(dst, sum.dests()...), &g.Entries)
		if err := s.Scan(dst...); err != nil {
			return g, err
		}
		g.AmountMicros = sum.value()
		g.Keys = make(map[string]string, len(by))
		for i, c := range by {
			if c == "currency" {
				g.Currency = vals[i]
				continue
			}
			g.Keys[c] = vals[i]
		}
		return g, nil
	})
}

// ProjectSpend sums the ledger of a project over [from, to), clamped to
// the int64 range (a spend beyond it is over any budget).
func (q *Queries) ProjectSpend(ctx context.Context, projectID string, from, to time.Time) (int64, error) {
	var sum bigSum
	err := q.queryRow(ctx, `SELECT `+exactSum("amount_micros")+` FROM ledger_entries WHERE project_id = ? AND usage_time >= ? AND usage_time < ?`,
		projectID, ts(from), ts(to)).Scan(sum.dests()...)
	return Saturate(sum.value()), mapErr(err)
}

const budgetCols = `project_id, org_id, gpu_quota, spend_limit_micros, currency, period, soft_threshold_percent, updated_by, created_at, updated_at`

func nullInt(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// GetBudget returns a project's budget.
func (q *Queries) GetBudget(ctx context.Context, projectID string) (billing.Budget, error) {
	return q.getBudget(ctx, projectID, "")
}

// LockBudget returns a project's budget and, on PostgreSQL, holds its row
// locked until the transaction ends, so launches of one project checked
// against it run one at a time. SQLite needs no lock: its writers are
// serialised already.
func (q *Queries) LockBudget(ctx context.Context, projectID string) (billing.Budget, error) {
	if q.d == Postgres {
		return q.getBudget(ctx, projectID, " FOR UPDATE")
	}
	return q.getBudget(ctx, projectID, "")
}

func (q *Queries) getBudget(ctx context.Context, projectID, lock string) (billing.Budget, error) {
	var (
		b          billing.Budget
		quota, lim sql.NullInt64
	)
	err := q.queryRow(ctx, `SELECT `+budgetCols+` FROM billing_budgets WHERE project_id = ?`+lock, projectID).Scan(
		&b.ProjectID, &b.OrgID, &quota, &lim, &b.Currency, &b.Period, &b.SoftThresholdPercent, &b.UpdatedBy,
		scanTime(&b.CreatedAt), scanTime(&b.UpdatedAt))
	if quota.Valid {
		b.GPUQuota = &quota.Int64
	}
	if lim.Valid {
		b.SpendLimitMicros = &lim.Int64
	}
	return b, scanOne(err)
}

// PutBudget creates or replaces a project's budget.
func (q *Queries) PutBudget(ctx context.Context, b billing.Budget) error {
	_, err := q.exec(ctx, `INSERT INTO billing_budgets (`+budgetCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
 ON CONFLICT (project_id) DO UPDATE SET gpu_quota = excluded.gpu_quota, spend_limit_micros = excluded.spend_limit_micros,
 currency = excluded.currency, period = excluded.period, soft_threshold_percent = excluded.soft_threshold_percent,
 updated_by = excluded.updated_by, updated_at = excluded.updated_at`,
		b.ProjectID, b.OrgID, nullInt(b.GPUQuota), nullInt(b.SpendLimitMicros), b.Currency, b.Period,
		b.SoftThresholdPercent, b.UpdatedBy, ts(b.CreatedAt), ts(b.UpdatedAt))
	return err
}

// RecordThresholdCrossing notes that a project crossed a budget level in a
// period and reports whether this call was the first to note it, so the
// crossing's event is emitted exactly once. It never fails on a repeat (a
// failed statement would abort a PostgreSQL transaction).
func (q *Queries) RecordThresholdCrossing(ctx context.Context, projectID string, periodStart time.Time, level string, at time.Time) (bool, error) {
	res, err := q.exec(ctx, `INSERT INTO billing_threshold_crossings (project_id, period_start, level, crossed_at) VALUES (?, ?, ?, ?)
 ON CONFLICT (project_id, period_start, level) DO NOTHING`, projectID, ts(periodStart), level, ts(at))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// MeteredIntervals returns the progress rows of the given kind for ids.
func (q *Queries) MeteredIntervals(ctx context.Context, kind string, ids []string) (map[string]billing.MeteredInterval, error) {
	out := make(map[string]billing.MeteredInterval, len(ids))
	for start := 0; start < len(ids); start += usageInsertChunk {
		chunk := ids[start:min(start+usageInsertChunk, len(ids))]
		args := []any{kind}
		for _, id := range chunk {
			args = append(args, id)
		}
		rows, err := q.query(ctx, `SELECT kind, interval_id, metered_until, closed_at FROM billing_metered_intervals WHERE kind = ? AND interval_id IN (`+
			placeholders(len(chunk))+`)`, args...)
		if err != nil {
			return nil, err
		}
		ms, err := collect(rows, func(s interface{ Scan(...any) error }) (billing.MeteredInterval, error) {
			var m billing.MeteredInterval
			return m, s.Scan(&m.Kind, &m.IntervalID, scanTime(&m.MeteredUntil), scanTime(&m.ClosedAt))
		})
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			out[m.IntervalID] = m
		}
	}
	return out, nil
}

// PutMeteredInterval records the progress of one interval.
func (q *Queries) PutMeteredInterval(ctx context.Context, m billing.MeteredInterval) error {
	_, err := q.exec(ctx, `INSERT INTO billing_metered_intervals (kind, interval_id, metered_until, closed_at) VALUES (?, ?, ?, ?)
 ON CONFLICT (kind, interval_id) DO UPDATE SET metered_until = excluded.metered_until, closed_at = excluded.closed_at`,
		m.Kind, m.IntervalID, ts(m.MeteredUntil), nullTS(m.ClosedAt))
	return err
}
