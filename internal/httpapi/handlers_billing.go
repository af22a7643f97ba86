package httpapi

import (
	"encoding/csv"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// usageMaxBody admits a full batch of usage events (10,000 small events).
const usageMaxBody = 16 << 20

// csvExportMax bounds one CSV export; a larger one is aborted (narrow the
// time range).
const csvExportMax = 200_000

func (a *API) billingService() (*billing.Service, error) {
	if a.Billing == nil {
		return nil, &errdefs.Error{Kind: errdefs.KindUnavailable, Code: "billing_unavailable", Message: "billing is not enabled on this server"}
	}
	return a.Billing, nil
}

// postUsage takes app usage as CloudEvents 1.0 JSON in structured mode:
// one event (application/cloudevents+json) or a batch
// (application/cloudevents-batch+json); plain application/json is read as
// either, by its first character. The answer comes after the events are
// committed, so an acknowledged event is never lost.
func (a *API) postUsage(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.billingService()
	if err != nil {
		return err
	}
	body, batch, err := readCloudEvents(r)
	if err != nil {
		return err
	}
	events, err := billing.ParseUsageEvents(body, batch, svc.Now())
	if err != nil {
		return err
	}
	res, err := svc.RecordAppUsage(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("app_instance_id"), events)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// billingQuery reads the filters every billing read shares.
func billingQuery(r *http.Request) (billing.Query, error) {
	v := r.URL.Query()
	qy := billing.Query{OrgID: v.Get("org_id"), ProjectID: v.Get("project_id"), AppInstanceID: v.Get("app_instance_id"),
		UsageSource: v.Get("usage_source"), UsageUnit: v.Get("usage_unit")}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"from", &qy.From}, {"to", &qy.To}} {
		if s := v.Get(f.name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return qy, errdefs.Invalid("invalid_time", "%s must be an RFC 3339 timestamp such as 2026-11-01T00:00:00Z", f.name)
			}
			*f.dst = t
		}
	}
	if g := v.Get("group_by"); g != "" {
		for _, c := range strings.Split(g, ",") {
			if c = strings.TrimSpace(c); c != "" {
				qy.GroupBy = append(qy.GroupBy, c)
			}
		}
	}
	return qy, nil
}

// wantsCSV: format=csv, or an Accept header that prefers text/csv.
func wantsCSV(r *http.Request) bool {
	if f := r.URL.Query().Get("format"); f != "" {
		return f == "csv"
	}
	return strings.Contains(r.Header.Get("Accept"), "text/csv")
}

func checkFormat(r *http.Request) error {
	if f := r.URL.Query().Get("format"); f != "" && f != "csv" && f != "json" {
		return errdefs.Invalid("invalid_format", "format must be json or csv")
	}
	return nil
}

type usageGroupView struct {
	Keys     map[string]string `json:"keys"`
	Quantity *big.Int          `json:"quantity"` // exact, may exceed 64 bits
	Records  int64             `json:"records"`
}

type usageGroupsView struct {
	GroupBy []string         `json:"group_by"`
	Groups  []usageGroupView `json:"groups"`
}

func (a *API) listUsage(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.billingService()
	if err != nil {
		return err
	}
	if err := checkFormat(r); err != nil {
		return err
	}
	qy, err := billingQuery(r)
	if err != nil {
		return err
	}
	ctx, g := r.Context(), grantsFrom(r.Context())
	if len(qy.GroupBy) > 0 {
		groups, err := svc.GroupUsage(ctx, g, qy)
		if err != nil {
			return err
		}
		out := usageGroupsView{GroupBy: qy.GroupBy, Groups: make([]usageGroupView, 0, len(groups))}
		for _, gr := range groups {
			out.Groups = append(out.Groups, usageGroupView{Keys: gr.Keys, Quantity: gr.Quantity, Records: gr.Records})
		}
		if wantsCSV(r) {
			cols := append(append([]string(nil), qy.GroupBy...), "usage_unit", "quantity", "records")
			return a.writeCSV(w, r, cols, func(emit func([]string) error) error {
				for _, gr := range out.Groups {
					row := make([]string, 0, len(cols))
					for _, c := range qy.GroupBy {
						row = append(row, gr.Keys[c])
					}
					row = append(row, gr.Keys["usage_unit"], gr.Quantity.String(), itoa64(gr.Records))
					if err := emit(row); err != nil {
						return err
					}
				}
				return nil
			})
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	if wantsCSV(r) {
		cols := []string{"id", "org_id", "project_id", "app_instance_id", "allocation_id", "app_slug", "operating_mode",
			"control_plane_scope", "runtime_backend", "correlation_id", "usage_source", "usage_unit", "quantity", "sku", "meter",
			"start_time", "end_time", "event_source", "event_id", "recorded_at"}
		// The scope is checked once, on the first page; an empty
		// export still fails loudly for a scope the caller cannot read.
		first, next, err := svc.ListUsage(ctx, g, qy, storage.Page{Limit: storage.MaxPageLimit})
		if err != nil {
			return err
		}
		return a.writeCSV(w, r, cols, func(emit func([]string) error) error {
			recs, n := first, 0
			for {
				for _, u := range recs {
					v := billing.ViewUsage(u)
					if err := emit([]string{v.ID, v.OrgID, v.ProjectID, v.AppInstanceID, v.AllocationID, v.AppSlug, v.OperatingMode,
						v.ControlPlaneScope, v.RuntimeBackend, v.CorrelationID, v.UsageSource, v.UsageUnit, itoa64(v.Quantity),
						v.SKU, v.Meter, v.StartTime, v.EndTime, v.EventSource, v.EventID, v.RecordedAt}); err != nil {
						return err
					}
				}
				n += len(recs)
				if next == "" {
					return nil
				}
				if n >= csvExportMax {
					return errCSVExportTooLarge
				}
				if recs, next, err = svc.ListUsage(ctx, g, qy, storage.Page{Limit: storage.MaxPageLimit, Cursor: next}); err != nil {
					return err
				}
			}
		})
	}
	p, err := page(r)
	if err != nil {
		return err
	}
	recs, next, err := svc.ListUsage(ctx, g, qy, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(recs, next, billing.ViewUsage))
	return nil
}

// Totals are exact: a sum of many entries may exceed 64 bits, and JSON
// numbers have no such limit.
type ledgerTotalView struct {
	Currency     string   `json:"currency"`
	AmountMicros *big.Int `json:"amount_micros"`
	Entries      int64    `json:"entries"`
}

type ledgerListView struct {
	Items      []billing.LedgerEntryView `json:"items"`
	NextCursor string                    `json:"next_cursor"`
	// Balance sums every entry matching the filters (all pages), per
	// currency: computed from the entries, never stored.
	Balance []ledgerTotalView `json:"balance"`
}

func (a *API) listLedger(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.billingService()
	if err != nil {
		return err
	}
	if err := checkFormat(r); err != nil {
		return err
	}
	qy, err := billingQuery(r)
	if err != nil {
		return err
	}
	if len(qy.GroupBy) > 0 {
		return errdefs.Invalid("invalid_group_by", "the ledger lists entries; for grouped totals use gpuaas billing costs --group-by (GET /api/v1/billing/costs)")
	}
	ctx, g := r.Context(), grantsFrom(r.Context())
	if wantsCSV(r) {
		cols := []string{"id", "org_id", "project_id", "entry_type", "usage_record_id", "corrects_entry_id", "app_instance_id",
			"usage_source", "usage_unit", "sku", "meter", "quantity", "price_id", "unit_price_micros", "per_quantity",
			"amount_micros", "currency", "reason", "usage_time", "created_by", "created_at"}
		first, next, err := svc.ListLedger(ctx, g, qy, storage.Page{Limit: storage.MaxPageLimit})
		if err != nil {
			return err
		}
		return a.writeCSV(w, r, cols, func(emit func([]string) error) error {
			es, n := first, 0
			for {
				for _, e := range es {
					v := billing.ViewEntry(e)
					if err := emit([]string{v.ID, v.OrgID, v.ProjectID, v.EntryType, v.UsageRecordID, v.CorrectsEntryID, v.AppInstanceID,
						v.UsageSource, v.UsageUnit, v.SKU, v.Meter, itoa64(v.Quantity), v.PriceID, itoa64(v.UnitPriceMicros),
						itoa64(v.PerQuantity), itoa64(v.AmountMicros), v.Currency, v.Reason, v.UsageTime, v.CreatedBy, v.CreatedAt}); err != nil {
						return err
					}
				}
				n += len(es)
				if next == "" {
					return nil
				}
				if n >= csvExportMax {
					return errCSVExportTooLarge
				}
				if es, next, err = svc.ListLedger(ctx, g, qy, storage.Page{Limit: storage.MaxPageLimit, Cursor: next}); err != nil {
					return err
				}
			}
		})
	}
	p, err := page(r)
	if err != nil {
		return err
	}
	es, next, err := svc.ListLedger(ctx, g, qy, p)
	if err != nil {
		return err
	}
	totals, err := a.Billing.LedgerBalance(ctx, g, qy)
	if err != nil {
		return err
	}
	out := ledgerListView{Items: make([]billing.LedgerEntryView, 0, len(es)), NextCursor: next, Balance: viewTotals(totals)}
	for _, e := range es {
		out.Items = append(out.Items, billing.ViewEntry(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func viewTotals(gs []billing.LedgerGroup) []ledgerTotalView {
	out := make([]ledgerTotalView, 0, len(gs))
	for _, g := range gs {
		out = append(out, ledgerTotalView{Currency: g.Currency, AmountMicros: g.AmountMicros, Entries: g.Entries})
	}
	return out
}

type costGroupView struct {
	Keys         map[string]string `json:"keys"`
	Currency     string            `json:"currency"`
	AmountMicros *big.Int          `json:"amount_micros"`
	Entries      int64             `json:"entries"`
}

type costsView struct {
	GroupBy []string          `json:"group_by"`
	Totals  []ledgerTotalView `json:"totals"`
	Groups  []costGroupView   `json:"groups"`
}

// billingCosts: the combined cost a tenant sees, or, grouped, the
// operators' breakdown by source, unit, SKU or meter.
func (a *API) billingCosts(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.billingService()
	if err != nil {
		return err
	}
	if err := checkFormat(r); err != nil {
		return err
	}
	qy, err := billingQuery(r)
	if err != nil {
		return err
	}
	groups, err := svc.Costs(r.Context(), grantsFrom(r.Context()), qy)
	if err != nil {
		return err
	}
	out := costsView{GroupBy: qy.GroupBy, Totals: []ledgerTotalView{}, Groups: []costGroupView{}}
	if out.GroupBy == nil {
		out.GroupBy = []string{}
	}
	sums := map[string]*ledgerTotalView{}
	for _, g := range groups {
		t := sums[g.Currency]
		if t == nil {
			out.Totals = append(out.Totals, ledgerTotalView{Currency: g.Currency, AmountMicros: new(big.Int)})
			t = &out.Totals[len(out.Totals)-1]
			sums[g.Currency] = t
		}
		t.AmountMicros.Add(t.AmountMicros, g.AmountMicros)
		t.Entries += g.Entries
		if len(qy.GroupBy) > 0 {
			out.Groups = append(out.Groups, costGroupView{Keys: g.Keys, Currency: g.Currency, AmountMicros: g.AmountMicros, Entries: g.Entries})
		}
	}
	if wantsCSV(r) {
		cols := append(append([]string(nil), qy.GroupBy...), "currency", "amount_micros", "entries")
		return a.writeCSV(w, r, cols, func(emit func([]string) error) error {
			if len(qy.GroupBy) == 0 {
				for _, t := range out.Totals {
					if err := emit([]string{t.Currency, t.AmountMicros.String(), itoa64(t.Entries)}); err != nil {
						return err
					}
				}
				return nil
			}
			for _, g := range out.Groups {
				row := make([]string, 0, len(cols))
				for _, c := range qy.GroupBy {
					row = append(row, g.Keys[c])
				}
				if err := emit(append(row, g.Currency, g.AmountMicros.String(), itoa64(g.Entries))); err != nil {
					return err
				}
			}
			return nil
		})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// writeCSV streams a CSV document: a header row, then what rows emits.
// The status is sent before the rows are read, so a later failure (the
// database gone mid-export, more than csvExportMax rows) cannot become an
// error answer; the response is aborted instead, so the client sees a
// failed download rather than a short file that looks complete.
func (a *API) writeCSV(w http.ResponseWriter, r *http.Request, header []string, rows func(emit func([]string) error) error) error {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", "attachment")
	w.WriteHeader(http.StatusOK)
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return nil // the client went away; the status is already sent
	}
	if err := rows(func(rec []string) error {
		for i, cell := range rec {
			rec[i] = csvCell(cell)
		}
		return cw.Write(rec)
	}); err != nil {
		a.Logger.ErrorContext(r.Context(), "CSV export aborted", "err", err, "correlation_id", correlation.ID(r.Context()))
		panic(http.ErrAbortHandler)
	}
	cw.Flush()
	return nil
}

// csvCell defuses a cell a spreadsheet would run as a formula: text that
// tenants and apps chose (an event id or source, a correction's reason)
// starting with = + - @ or a tab or carriage return gets a leading ' (the
// OWASP advice), so a finance team opening the export runs nothing. Numbers,
// negative ones included, stay as they are.
func csvCell(s string) string {
	if s == "" || !strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return s
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return s
	}
	return "'" + s
}

// errCSVExportTooLarge ends an export past csvExportMax rows.
var errCSVExportTooLarge = fmt.Errorf("the export has more than %d rows; narrow the time range", csvExportMax)

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func (a *API) getBudget(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.billingService()
	if err != nil {
		return err
	}
	b, err := svc.GetBudget(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

func (a *API) putBudget(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.billingService()
	if err != nil {
		return err
	}
	var in billing.BudgetInput
	if err := decode(r, &in); err != nil {
		return err
	}
	b, err := svc.PutBudget(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

func (a *API) createPrice(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.billingService()
	if err != nil {
		return err
	}
	var in billing.PriceInput
	if err := decode(r, &in); err != nil {
		return err
	}
	p, err := svc.CreatePrice(r.Context(), grantsFrom(r.Context()), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, billing.ViewPrice(p))
	return nil
}

func (a *API) listPrices(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.billingService()
	if err != nil {
		return err
	}
	p, err := page(r)
	if err != nil {
		return err
	}
	ps, next, err := svc.ListPrices(r.Context(), grantsFrom(r.Context()), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(ps, next, billing.ViewPrice))
	return nil
}

func (a *API) correctLedgerEntry(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.billingService()
	if err != nil {
		return err
	}
	var in billing.CorrectionInput
	if err := decode(r, &in); err != nil {
		return err
	}
	e, err := svc.Correct(r.Context(), grantsFrom(r.Context()), r.PathValue("entry_id"), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, billing.ViewEntry(e))
	return nil
}

type unratedUsageView struct {
	UsageRecord billing.UsageRecordView `json:"usage_record"`
	Reason      string                  `json:"reason"`
	Detail      string                  `json:"detail"`
	ParkedAt    string                  `json:"parked_at,omitempty"`
}

type unratedUsageListView struct {
	Items      []unratedUsageView `json:"items"`
	NextCursor string             `json:"next_cursor"`
	// Counts: unrated records by reason (parked ones, and those the last
	// rating run left waiting for a price).
	Counts map[string]int64 `json:"counts"`
}

// listUnratedUsage: usage records with no charge and why (operators).
func (a *API) listUnratedUsage(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.billingService()
	if err != nil {
		return err
	}
	p, err := page(r)
	if err != nil {
		return err
	}
	rs, next, err := svc.ListUnrated(r.Context(), grantsFrom(r.Context()), p)
	if err != nil {
		return err
	}
	counts, err := svc.UnratedCounts(r.Context())
	if err != nil {
		return err
	}
	out := unratedUsageListView{Items: make([]unratedUsageView, 0, len(rs)), NextCursor: next, Counts: counts}
	for _, u := range rs {
		v := unratedUsageView{UsageRecord: billing.ViewUsage(u.Record), Reason: u.Reason, Detail: u.Detail}
		if !u.ParkedAt.IsZero() {
			v.ParkedAt = u.ParkedAt.UTC().Format(time.RFC3339Nano)
		}
		out.Items = append(out.Items, v)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// unratedDesc is gpuaas_billing_unrated_usage_records{reason}.
var unratedDesc = prometheus.NewDesc("gpuaas_billing_unrated_usage_records",
	"Usage records with no charge, by reason: no_price (waiting for a price), amount_overflow and rating_failed (parked).",
	[]string{"reason"}, nil)
