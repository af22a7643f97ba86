package billing

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// rateBatch is how many usage records one rating transaction takes.
const rateBatch = 500

// rateWindow is how many entries of the rating queue a pass reads at once.
// Records waiting for a price and parked ones stay queued and are read on
// every pass: a wide window reads them in few queries.
const rateWindow = 5000

// errNothingToPost rolls back a rating transaction that posted nothing (or
// a park another rater already made), so it leaves no audit row behind.
var errNothingToPost = errors.New("billing: nothing to post")

// Amount is quantity × unitPrice / perQuantity in micro-units, rounded half
// up, computed exactly (no floats, no intermediate overflow). It fails only
// when the result does not fit in 64 bits.
func Amount(quantity, unitPriceMicros, perQuantity int64) (int64, error) {
	if perQuantity <= 0 {
		return 0, fmt.Errorf("billing: per_quantity must be positive")
	}
	n := new(big.Int).Mul(big.NewInt(quantity), big.NewInt(unitPriceMicros))
	n.Add(n, big.NewInt(perQuantity/2))
	n.Quo(n, big.NewInt(perQuantity))
	if !n.IsInt64() {
		return 0, fmt.Errorf("billing: amount of %d × %d / %d overflows", quantity, unitPriceMicros, perQuantity)
	}
	return n.Int64(), nil
}

// systemContext is the context of billing's own work: the platform acting,
// under a correlation id of its own.
func systemContext(ctx context.Context) context.Context {
	ctx = principal.With(ctx, principal.SystemActor)
	if correlation.ID(ctx) == "" {
		ctx = correlation.With(ctx, correlation.New())
	}
	return ctx
}

// Reasons a usage record is unrated, as operators see them.
const (
	// UnratedNoPrice: no price is in effect at the record's start; it is
	// rated once an admin adds one that covers it.
	UnratedNoPrice = "no_price"
	// UnratedAmountOverflow: quantity × price does not fit in 64 bits;
	// the record is parked.
	UnratedAmountOverflow = "amount_overflow"
	// UnratedRatingFailed: posting its charge failed on its own; parked.
	UnratedRatingFailed = "rating_failed"
	// UnratedPending: priced, not parked; the next rating run charges it.
	UnratedPending = "pending"
)

// Rate posts a charge for every usage record that has none yet and whose
// price is known, and reports how many it posted. Records with no price in
// effect wait, unrated, until an admin adds one. Rating is idempotent: the
// ledger holds at most one charge per usage record, so concurrent or
// repeated runs never charge twice. Each record is rated in isolation: one
// that cannot be rated is parked with its reason (see UnratedUsage) and the
// others are charged all the same.
func (s *Service) Rate(ctx context.Context) (int, error) {
	ctx = systemContext(ctx)
	after, total, unpriced := "", 0, int64(0)
	for {
		recs, next, err := s.Store.Read().UnratedUsage(ctx, after, rateWindow)
		if err != nil {
			return total, err
		}
		for len(recs) > 0 {
			batch := recs[:min(len(recs), rateBatch)]
			recs = recs[len(batch):]
			n, np, err := s.rate(ctx, batch)
			total, unpriced = total+n, unpriced+np
			if err != nil {
				return total, err
			}
		}
		if next == "" {
			break
		}
		after = next
	}
	s.unpriced.Store(unpriced)
	return total, nil
}

// charge is one record ready to post.
type charge struct {
	rec    UsageRecord
	price  Price
	amount int64
}

// rate prices recs, parks those whose amount cannot be computed, and posts
// the rest in one transaction; should that fail, it posts them one by one
// and parks each that fails alone. It reports the charges posted and the
// records left waiting for a price.
func (s *Service) rate(ctx context.Context, recs []UsageRecord) (posted int, unpriced int64, err error) {
	q := s.Store.Read()
	var cs []charge
	for _, r := range recs {
		p, err := s.priceFor(ctx, q, r)
		if errors.Is(err, storage.ErrNotFound) {
			unpriced++
			continue
		}
		if err != nil {
			return 0, unpriced, err
		}
		amount, err := Amount(r.Quantity, p.UnitPriceMicros, p.PerQuantity)
		if err != nil {
			if err := s.park(ctx, r, UnratedAmountOverflow, err.Error()); err != nil {
				return 0, unpriced, err
			}
			continue
		}
		cs = append(cs, charge{rec: r, price: p, amount: amount})
	}
	n, err := s.post(ctx, cs)
	if err == nil {
		return n, unpriced, nil
	}
	if transient(ctx, err) {
		return 0, unpriced, err // the next run tries again
	}
	s.Logger.WarnContext(ctx, "billing: a rating batch failed; rating its records one by one", "records", len(cs), "error", err)
	for _, c := range cs {
		n, err := s.post(ctx, []charge{c})
		if err == nil {
			posted += n
			continue
		}
		if transient(ctx, err) {
			return posted, unpriced, err // the next run tries again
		}
		if err := s.park(ctx, c.rec, UnratedRatingFailed, err.Error()); err != nil {
			return posted, unpriced, err
		}
	}
	return posted, unpriced, nil
}

// transient reports a failure that says nothing about the records: the run
// was cancelled, a deadlock was broken, or the database went away. Such a
// batch is retried next run, never parked.
func transient(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, storage.ErrDeadlock) || errors.Is(err, storage.ErrUnavailable)
}

// park sets a record that cannot be rated aside, audited, so rating runs
// go on past it; operators see it with its reason.
func (s *Service) park(ctx context.Context, r UsageRecord, reason, detail string) error {
	s.Logger.WarnContext(ctx, "billing: usage record parked unrated", "usage_record_id", r.ID, "project_id", r.ProjectID,
		"reason", reason, "detail", detail)
	p := ParkedUsage{UsageRecordID: r.ID, OrgID: r.OrgID, ProjectID: r.ProjectID, Reason: reason, Detail: detail,
		ParkedAt: s.Now().UTC()}
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		parked, err := tx.ParkUsage(ctx, p)
		if err != nil {
			return err
		}
		if !parked {
			return errNothingToPost // another rater parked it: no second audit row
		}
		return tx.Audit(storage.AuditEvent{Action: "billing.usage.park", ResourceType: "usage_record", ResourceID: r.ID,
			OrgID: r.OrgID, ProjectID: r.ProjectID, Reason: reason}, nil, map[string]string{"reason": reason, "detail": detail})
	})
	if errors.Is(err, errNothingToPost) {
		return nil
	}
	return err
}

// post charges cs in one transaction.
func (s *Service) post(ctx context.Context, cs []charge) (int, error) {
	if len(cs) == 0 {
		return 0, nil
	}
	now := s.Now().UTC()
	posted := 0
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		posted = 0
		touched := map[string]bool{}
		for _, c := range cs {
			r, p := c.rec, c.price
			e := LedgerEntry{ID: iam.NewID(), OrgID: r.OrgID, ProjectID: r.ProjectID, EntryType: EntryCharge,
				UsageRecordID: r.ID, AppInstanceID: r.AppInstanceID, UsageSource: r.UsageSource, UsageUnit: r.UsageUnit,
				SKU: r.SKU, Meter: r.Meter, Quantity: r.Quantity, PriceID: p.ID, UnitPriceMicros: p.UnitPriceMicros,
				PerQuantity: p.PerQuantity, AmountMicros: c.amount, Currency: p.Currency, UsageTime: r.StartTime,
				CreatedBy: principal.SystemActor.Key(), CreatedAt: now}
			ok, err := tx.InsertCharge(ctx, e)
			if err != nil {
				return err
			}
			if !ok {
				continue // another rater got there first
			}
			posted++
			touched[r.ProjectID] = true
			if err := tx.Emit(storage.Event{Type: EventLedgerEntryPosted, Subject: "ledger-entries/" + e.ID,
				OrgID: e.OrgID, ProjectID: e.ProjectID}, ViewEntry(e)); err != nil {
				return err
			}
		}
		if posted == 0 {
			return errNothingToPost
		}
		for project := range touched {
			if err := s.checkThresholds(ctx, tx, project, now); err != nil {
				return err
			}
		}
		return tx.Audit(storage.AuditEvent{Action: "billing.ledger.rate", ResourceType: "ledger"}, nil,
			map[string]int{"charges_posted": posted})
	})
	if errors.Is(err, errNothingToPost) {
		return 0, nil
	}
	return posted, err
}

// priceFor finds the price in effect at the record's start: the SKU's for
// allocation usage; the app's own meter, else the default meter of the
// unit, for app usage.
func (s *Service) priceFor(ctx context.Context, q Queries, r UsageRecord) (Price, error) {
	if r.UsageSource == UsageSourceAllocation {
		return q.PriceAt(ctx, r.UsageSource, r.SKU, "", r.StartTime)
	}
	p, err := q.PriceAt(ctx, r.UsageSource, "", r.Meter, r.StartTime)
	if errors.Is(err, storage.ErrNotFound) {
		return q.PriceAt(ctx, r.UsageSource, "", DefaultMeter(r.UsageUnit), r.StartTime)
	}
	return p, err
}

// PeriodBounds returns the budget period holding t: a UTC day or month.
func PeriodBounds(period string, t time.Time) (time.Time, time.Time) {
	t = t.UTC()
	if period == "day" {
		start := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	}
	start := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

// checkThresholds emits billing.budget.threshold_crossed the first time a
// project's spend in the current period reaches its soft threshold, and
// again (level "limit") when it reaches the limit itself.
func (s *Service) checkThresholds(ctx context.Context, tx Tx, projectID string, now time.Time) error {
	b, err := tx.GetBudget(ctx, projectID)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && b.SpendLimitMicros == nil) {
		return nil
	}
	if err != nil {
		return err
	}
	start, end := PeriodBounds(b.Period, now)
	spent, err := tx.ProjectSpend(ctx, projectID, start, end)
	if err != nil {
		return err
	}
	limit := *b.SpendLimitMicros
	levels := []struct {
		name    string
		reached bool
	}{
		{"soft", big.NewInt(0).Mul(big.NewInt(spent), big.NewInt(100)).Cmp(big.NewInt(0).Mul(big.NewInt(limit), big.NewInt(int64(b.SoftThresholdPercent)))) >= 0},
		{"limit", spent >= limit},
	}
	for _, l := range levels {
		if !l.reached {
			continue
		}
		first, err := tx.RecordThresholdCrossing(ctx, projectID, start, l.name, now)
		if err != nil {
			return err
		}
		if !first {
			continue
		}
		if err := tx.Emit(storage.Event{Type: EventBudgetThresholdCrossed, Subject: "projects/" + projectID + "/billing/budget",
			OrgID: b.OrgID, ProjectID: projectID}, map[string]any{
			"project_id": projectID, "level": l.name, "period": b.Period, "period_start": rfc(start),
			"spend_micros": spent, "spend_limit_micros": limit, "soft_threshold_percent": b.SoftThresholdPercent,
			"currency": b.Currency,
		}); err != nil {
			return err
		}
	}
	return nil
}
