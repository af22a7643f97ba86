package billing

import (
	"context"
	"errors"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// UnratedRecord is a usage record that has no charge, and why.
type UnratedRecord struct {
	Record UsageRecord
	// Reason: no_price (waits for a price), amount_overflow or
	// rating_failed (parked), or pending (priced; the next rating run
	// charges it).
	Reason   string
	Detail   string
	ParkedAt time.Time
}

// UnratedCounts counts unrated usage by reason: parked records from the
// database, records waiting for a price as the last rating run found them.
func (s *Service) UnratedCounts(ctx context.Context) (map[string]int64, error) {
	out, err := s.Store.Read().CountParkedUsage(ctx)
	if err != nil {
		return nil, err
	}
	out[UnratedNoPrice] = s.unpriced.Load()
	for _, r := range []string{UnratedAmountOverflow, UnratedRatingFailed} {
		out[r] += 0 // every reason is reported, zero included
	}
	return out, nil
}

// ListUnrated lists usage records with no charge and the reason of each
// (billing.breakdown.read or billing.prices.write: operators).
func (s *Service) ListUnrated(ctx context.Context, g *iam.Grants, page storage.Page) ([]UnratedRecord, string, error) {
	if !g.Can(iam.PermBillingBreakdownRead, iam.Scope{}) {
		if err := s.IAM.RequirePlatform(ctx, g, iam.PermBillingPricesWrite, "usage_record"); err != nil {
			return nil, "", err
		}
	}
	q := s.Store.Read()
	rs, next, err := q.ListUnratedUsage(ctx, page)
	if err != nil {
		return nil, "", err
	}
	out := make([]UnratedRecord, 0, len(rs))
	for _, r := range rs {
		u := UnratedRecord{Record: r.Record, Reason: r.Parked.Reason, Detail: r.Parked.Detail, ParkedAt: r.Parked.ParkedAt}
		if u.Reason == "" {
			u.Reason = UnratedPending
			if _, err := s.priceFor(ctx, q, r.Record); errors.Is(err, storage.ErrNotFound) {
				u.Reason = UnratedNoPrice
			} else if err != nil {
				return nil, "", err
			}
		}
		out = append(out, u)
	}
	return out, next, nil
}
