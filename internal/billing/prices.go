package billing

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// MaxMicrosPerUnit bounds a price: unit_price_micros / per_quantity, the
// price of one unit, is at most 9,000 currency units (a job or a request
// may be dear; a token or a GPU-second is far below). With MaxQuantity this
// keeps every accepted event's amount (at most 9×10^18 micro-units) within
// 64 bits, so what ingest accepts can always be rated.
const MaxMicrosPerUnit = 9_000_000_000

// PriceInput is the body of POST /api/v1/admin/billing/prices: a new
// version of the price of a SKU (allocation GPU-seconds) or of a meter
// ("<app_slug>/<unit>", or "*/<unit>" for every app without its own).
type PriceInput struct {
	UsageSource     string `json:"usage_source"`
	SKU             string `json:"sku,omitempty"`
	Meter           string `json:"meter,omitempty"`
	UsageUnit       string `json:"usage_unit,omitempty"`
	UnitPriceMicros *int64 `json:"unit_price_micros"`
	// PerQuantity: the price is for this many units. Defaults to 3600 for
	// allocations (a price per GPU-hour of gpu_seconds) and 1 otherwise.
	PerQuantity   int64     `json:"per_quantity,omitempty"`
	Currency      string    `json:"currency,omitempty"`
	EffectiveFrom time.Time `json:"effective_from,omitzero"`
	Note          string    `json:"note,omitempty"`
}

// CreatePrice adds a price version (billing.prices.write: platform admins),
// audited. Prices are never edited: a change is a new version effective from
// a time, and usage already rated keeps the price it was rated at.
func (s *Service) CreatePrice(ctx context.Context, g *iam.Grants, in PriceInput) (Price, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermBillingPricesWrite, "billing_price"); err != nil {
		return Price{}, err
	}
	p, err := s.checkPrice(in)
	if err != nil {
		return Price{}, err
	}
	p.CreatedBy = principal.From(ctx).Key()
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		v, err := tx.LatestPriceVersion(ctx, p.UsageSource, p.SKU, p.Meter)
		if err != nil {
			return err
		}
		p.Version = v + 1
		if err := tx.InsertPrice(ctx, p); err != nil {
			if errors.Is(err, storage.ErrAlreadyExists) {
				return errdefs.Conflict("price_version_race", "another price version for this sku or meter was added at the same moment; retry")
			}
			return err
		}
		if err := tx.Emit(storage.Event{Type: EventPriceCreated, Subject: "billing-prices/" + p.ID}, ViewPrice(p)); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "billing.price.create", ResourceType: "billing_price", ResourceID: p.ID}, nil, ViewPrice(p))
	})
	return p, err
}

func (s *Service) checkPrice(in PriceInput) (Price, error) {
	now := s.Now().UTC()
	p := Price{ID: iam.NewID(), UsageSource: in.UsageSource, SKU: strings.TrimSpace(in.SKU), Meter: strings.TrimSpace(in.Meter),
		UsageUnit: in.UsageUnit, PerQuantity: in.PerQuantity, Currency: in.Currency, EffectiveFrom: in.EffectiveFrom.UTC(),
		Note: in.Note, CreatedAt: now}
	var fe []errdefs.FieldError
	bad := func(field, code, msg string) {
		fe = append(fe, errdefs.FieldError{Field: field, Code: code, Message: msg})
	}
	switch p.UsageSource {
	case UsageSourceAllocation:
		if p.SKU == "" {
			bad("/sku", "required", "is required for allocation prices (e.g. h100-80gb.1x)")
		}
		if p.Meter != "" {
			bad("/meter", "not_allowed", "is for app_runtime prices; allocation prices name a sku")
		}
		if p.UsageUnit == "" {
			p.UsageUnit = UnitGPUSeconds
		}
		if p.UsageUnit != UnitGPUSeconds {
			bad("/usage_unit", "invalid", "allocation usage is metered in gpu_seconds")
		}
		if p.PerQuantity == 0 {
			p.PerQuantity = 3600
		}
	case UsageSourceAppRuntime:
		app, unit, ok := strings.Cut(p.Meter, "/")
		switch {
		case p.SKU != "":
			bad("/sku", "not_allowed", "is for allocation prices; app_runtime prices name a meter")
		case !ok || app == "" || unit == "":
			bad("/meter", "invalid", "must be <app_slug>/<unit> (e.g. vllm/tokens), or */<unit> for every app without a price of its own")
		case !slices.Contains(append([]string{KindSessionSeconds}, AppEmittedKinds...), unit):
			bad("/meter", "invalid", "the unit must be one of the manifest metering kinds: session_seconds, gpu_seconds, tokens, requests")
		}
		if p.UsageUnit == "" {
			p.UsageUnit = unit
		}
		if p.UsageUnit != unit {
			bad("/usage_unit", "invalid", "must match the meter's unit")
		}
		if p.PerQuantity == 0 {
			p.PerQuantity = 1
		}
	default:
		bad("/usage_source", "invalid", "must be allocation or app_runtime")
	}
	switch {
	case in.UnitPriceMicros == nil || *in.UnitPriceMicros < 0:
		bad("/unit_price_micros", "required", "is required: a whole number of micro-units of the currency, 0 or more")
	case p.PerQuantity > 0 && new(big.Int).Mul(big.NewInt(MaxMicrosPerUnit), big.NewInt(p.PerQuantity)).Cmp(big.NewInt(*in.UnitPriceMicros)) < 0:
		bad("/unit_price_micros", "out_of_range", fmt.Sprintf("must be at most %d × per_quantity: one unit may cost at most %d micro-units", MaxMicrosPerUnit, MaxMicrosPerUnit))
	default:
		p.UnitPriceMicros = *in.UnitPriceMicros
	}
	if p.PerQuantity <= 0 {
		bad("/per_quantity", "out_of_range", "must be a positive number of units")
	}
	if p.Currency == "" {
		p.Currency = s.Config.Currency
	}
	if p.Currency != s.Config.Currency {
		bad("/currency", "unsupported", "must be "+s.Config.Currency+", this platform's billing currency")
	}
	if p.EffectiveFrom.IsZero() {
		p.EffectiveFrom = now
	} else if err := storage.CheckTime("effective_from", p.EffectiveFrom); err != nil {
		// Year 0 is a 500 on PostgreSQL; SQLite keeps a five-digit year
		// as text that compares before every four-digit one.
		bad("/effective_from", "out_of_range", "must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z")
	}
	// Whole seconds: usage timestamps are often whole seconds, and usage
	// sent the second a price was created must find it.
	p.EffectiveFrom = p.EffectiveFrom.Truncate(time.Second)
	if fe != nil {
		return p, errdefs.Validation(fe)
	}
	return p, nil
}

// ListPrices lists every price version (billing.prices.write or
// billing.breakdown.read: operators).
func (s *Service) ListPrices(ctx context.Context, g *iam.Grants, page storage.Page) ([]Price, string, error) {
	if !g.Can(iam.PermBillingBreakdownRead, iam.Scope{}) {
		if err := s.IAM.RequirePlatform(ctx, g, iam.PermBillingPricesWrite, "billing_price"); err != nil {
			return nil, "", err
		}
	}
	return s.Store.Read().ListPrices(ctx, page)
}

// CorrectionInput is the body of POST …/ledger/{entry_id}/corrections.
type CorrectionInput struct {
	AmountMicros *int64 `json:"amount_micros"`
	Reason       string `json:"reason"`
}

// Correct posts a compensating entry linked to an earlier one
// (billing.ledger.correct: platform admins), audited. The original stays
// as it was; the balance is the sum of both.
func (s *Service) Correct(ctx context.Context, g *iam.Grants, entryID string, in CorrectionInput) (LedgerEntry, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermBillingLedgerCorrect, "ledger_entry"); err != nil {
		return LedgerEntry{}, err
	}
	var fe []errdefs.FieldError
	if in.AmountMicros == nil || *in.AmountMicros == 0 {
		fe = append(fe, errdefs.FieldError{Field: "/amount_micros", Code: "required",
			Message: "is required: the signed amount to add, in micro-units (negative to refund)"})
	}
	if strings.TrimSpace(in.Reason) == "" {
		fe = append(fe, errdefs.FieldError{Field: "/reason", Code: "required", Message: "is required: why the entry is corrected"})
	}
	if fe != nil {
		return LedgerEntry{}, errdefs.Validation(fe)
	}
	var out LedgerEntry
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		orig, err := tx.GetLedgerEntry(ctx, entryID)
		if errors.Is(err, storage.ErrNotFound) {
			return errdefs.NotFound("ledger_entry_not_found", "ledger entry %q does not exist", entryID)
		}
		if err != nil {
			return err
		}
		out = LedgerEntry{ID: iam.NewID(), OrgID: orig.OrgID, ProjectID: orig.ProjectID, EntryType: EntryCorrection,
			CorrectsEntryID: orig.ID, AppInstanceID: orig.AppInstanceID, UsageSource: orig.UsageSource, UsageUnit: orig.UsageUnit,
			SKU: orig.SKU, Meter: orig.Meter, PerQuantity: 1, AmountMicros: *in.AmountMicros, Currency: orig.Currency,
			Reason: in.Reason, UsageTime: orig.UsageTime, CreatedBy: principal.From(ctx).Key(), CreatedAt: s.Now().UTC()}
		if err := tx.InsertLedgerEntry(ctx, out); err != nil {
			return err
		}
		if err := tx.Emit(storage.Event{Type: EventLedgerEntryPosted, Subject: "ledger-entries/" + out.ID,
			OrgID: out.OrgID, ProjectID: out.ProjectID}, ViewEntry(out)); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "billing.ledger.correct", ResourceType: "ledger_entry", ResourceID: orig.ID,
			OrgID: orig.OrgID, ProjectID: orig.ProjectID, Reason: in.Reason}, ViewEntry(orig), ViewEntry(out))
	})
	return out, err
}
