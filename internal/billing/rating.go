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
	"github.com/gpuaas/gpuaas/internal/store"
)

// rateBatch is how many usage records one rating transaction takes.
const rateBatch = 500

// errNothingToPost rolls back a rating transaction that posted nothing, so
// an idle run leaves no audit row behind.
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

// Rate posts a charge for every usage record that has none yet and whose
// price is known, and reports how many it posted. Records with no price in
// effect wait, unrated, until an admin adds one. Rating is idempotent: the
// ledger holds at most one charge per usage record, so concurrent or
// repeated runs never charge twice.
func (s *Service) Rate(ctx context.Context) (int, error) {
	ctx = systemContext(ctx)
	after, total := "", 0
	for {
		recs, err := s.DB.Queries().UnratedUsage(ctx, after, rateBatch)
		if err != nil {
			return total, err
		}
		if len(recs) == 0 {
			return total, nil
		}
		after = recs[len(recs)-1].ID
		n, err := s.rate(ctx, recs)
		total += n
		if err != nil {
			return total, err
		}
		if len(recs) < rateBatch {
			return total, nil
		}
	}
}

func (s *Service) rate(ctx context.Context, recs []store.UsageRecord) (int, error) {
	now := s.Now().UTC()
	posted := 0
	err := s.DB.Mutate(ctx, func(tx *store.Tx) error {
		posted = 0
		touched := map[string]bool{}
		for _, r := range recs {
			p, err := s.priceFor(ctx, tx.Queries, r)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			amount, err := Amount(r.Quantity, p.UnitPriceMicros, p.PerQuantity)
			if err != nil {
				return err
			}
			e := store.LedgerEntry{ID: iam.NewID(), OrgID: r.OrgID, ProjectID: r.ProjectID, EntryType: store.EntryCharge,
				UsageRecordID: r.ID, AppInstanceID: r.AppInstanceID, UsageSource: r.UsageSource, UsageUnit: r.UsageUnit,
				SKU: r.SKU, Meter: r.Meter, Quantity: r.Quantity, PriceID: p.ID, UnitPriceMicros: p.UnitPriceMicros,
				PerQuantity: p.PerQuantity, AmountMicros: amount, Currency: p.Currency, UsageTime: r.StartTime,
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
			if err := tx.Emit(store.Event{Type: EventLedgerEntryPosted, Subject: "ledger-entries/" + e.ID,
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
		return tx.Audit(store.AuditEvent{Action: "billing.ledger.rate", ResourceType: "ledger"}, nil,
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
func (s *Service) priceFor(ctx context.Context, q *store.Queries, r store.UsageRecord) (store.Price, error) {
	if r.UsageSource == store.UsageSourceAllocation {
		return q.PriceAt(ctx, r.UsageSource, r.SKU, "", r.StartTime)
	}
	p, err := q.PriceAt(ctx, r.UsageSource, "", r.Meter, r.StartTime)
	if errors.Is(err, store.ErrNotFound) {
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
func (s *Service) checkThresholds(ctx context.Context, tx *store.Tx, projectID string, now time.Time) error {
	b, err := tx.GetBudget(ctx, projectID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && b.SpendLimitMicros == nil) {
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
		if err := tx.Emit(store.Event{Type: EventBudgetThresholdCrossed, Subject: "projects/" + projectID + "/billing/budget",
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
