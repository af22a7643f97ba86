package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// UsageRecord is one metered quantity (GET /api/v1/billing/usage).
type UsageRecord struct {
	ID                string `json:"id"`
	OrgID             string `json:"org_id"`
	ProjectID         string `json:"project_id"`
	AppInstanceID     string `json:"app_instance_id"`
	AllocationID      string `json:"allocation_id"`
	AppSlug           string `json:"app_slug"`
	OperatingMode     string `json:"operating_mode"`
	ControlPlaneScope string `json:"control_plane_scope"`
	RuntimeBackend    string `json:"runtime_backend"`
	CorrelationID     string `json:"correlation_id"`
	UsageSource       string `json:"usage_source"`
	UsageUnit         string `json:"usage_unit"`
	Quantity          int64  `json:"quantity"`
	SKU               string `json:"sku"`
	Meter             string `json:"meter"`
	StartTime         string `json:"start_time"`
	EndTime           string `json:"end_time"`
	EventSource       string `json:"event_source"`
	EventID           string `json:"event_id"`
	RecordedAt        string `json:"recorded_at"`
}

// UsageGroups are usage totals (GET /api/v1/billing/usage?group_by=…).
type UsageGroups struct {
	GroupBy []string `json:"group_by"`
	Groups  []struct {
		Keys     map[string]string `json:"keys"`
		Quantity *big.Int          `json:"quantity"` // exact: may exceed 64 bits
		Records  int64             `json:"records"`
	} `json:"groups"`
}

// LedgerEntry is one append-only ledger line.
type LedgerEntry struct {
	ID              string `json:"id"`
	OrgID           string `json:"org_id"`
	ProjectID       string `json:"project_id"`
	EntryType       string `json:"entry_type"`
	UsageRecordID   string `json:"usage_record_id,omitempty"`
	CorrectsEntryID string `json:"corrects_entry_id,omitempty"`
	AppInstanceID   string `json:"app_instance_id"`
	UsageSource     string `json:"usage_source"`
	UsageUnit       string `json:"usage_unit"`
	SKU             string `json:"sku"`
	Meter           string `json:"meter"`
	Quantity        int64  `json:"quantity"`
	PriceID         string `json:"price_id,omitempty"`
	UnitPriceMicros int64  `json:"unit_price_micros"`
	PerQuantity     int64  `json:"per_quantity"`
	AmountMicros    int64  `json:"amount_micros"`
	Currency        string `json:"currency"`
	Reason          string `json:"reason"`
	UsageTime       string `json:"usage_time"`
	CreatedBy       string `json:"created_by"`
	CreatedAt       string `json:"created_at"`
}

// BillingTotal is a sum of ledger entries in one currency.
type BillingTotal struct {
	Currency     string   `json:"currency"`
	AmountMicros *big.Int `json:"amount_micros"` // exact: may exceed 64 bits
	Entries      int64    `json:"entries"`
}

// LedgerPage is a page of entries and the balance of all matching entries.
type LedgerPage struct {
	Items      []LedgerEntry  `json:"items"`
	NextCursor string         `json:"next_cursor"`
	Balance    []BillingTotal `json:"balance"`
}

// BillingCosts is the combined cost, or the breakdown when grouped.
type BillingCosts struct {
	GroupBy []string       `json:"group_by"`
	Totals  []BillingTotal `json:"totals"`
	Groups  []struct {
		Keys         map[string]string `json:"keys"`
		Currency     string            `json:"currency"`
		AmountMicros *big.Int          `json:"amount_micros"` // exact: may exceed 64 bits
		Entries      int64             `json:"entries"`
	} `json:"groups"`
}

// BillingQuery filters every billing read; empty fields do not filter.
type BillingQuery struct {
	OrgID, ProjectID, AppInstanceID, UsageSource, UsageUnit string
	From, To                                                time.Time
	GroupBy                                                 []string
	Limit                                                   int
	Cursor                                                  string
}

func (q BillingQuery) values() url.Values {
	v := listQuery(map[string]string{"org_id": q.OrgID, "project_id": q.ProjectID, "app_instance_id": q.AppInstanceID,
		"usage_source": q.UsageSource, "usage_unit": q.UsageUnit, "cursor": q.Cursor}, q.Limit)
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.UTC().Format(time.RFC3339))
	}
	if len(q.GroupBy) > 0 {
		v.Set("group_by", strings.Join(q.GroupBy, ","))
	}
	return v
}

// ListUsage lists usage records.
//
// Operation: listBillingUsage
func (c *Client) ListUsage(ctx context.Context, q BillingQuery) (CatalogPage[UsageRecord], error) {
	var out CatalogPage[UsageRecord]
	q.GroupBy = nil
	return out, c.Do(ctx, "GET", "/api/v1/billing/usage", q.values(), nil, &out)
}

// GroupUsage returns usage totals grouped by q.GroupBy.
//
// Operation: listBillingUsage
func (c *Client) GroupUsage(ctx context.Context, q BillingQuery) (UsageGroups, error) {
	var out UsageGroups
	return out, c.Do(ctx, "GET", "/api/v1/billing/usage", q.values(), nil, &out)
}

// ListLedger lists ledger entries with the balance.
//
// Operation: listBillingLedger
func (c *Client) ListLedger(ctx context.Context, q BillingQuery) (LedgerPage, error) {
	var out LedgerPage
	return out, c.Do(ctx, "GET", "/api/v1/billing/ledger", q.values(), nil, &out)
}

// Costs returns the combined cost (or the operators' breakdown).
//
// Operation: getBillingCosts
func (c *Client) Costs(ctx context.Context, q BillingQuery) (BillingCosts, error) {
	var out BillingCosts
	return out, c.Do(ctx, "GET", "/api/v1/billing/costs", q.values(), nil, &out)
}

// ExportCSV streams a billing read ("usage", "ledger" or "costs") as CSV
// into w.
//
// Operation: listBillingUsage listBillingLedger getBillingCosts
func (c *Client) ExportCSV(ctx context.Context, what string, q BillingQuery, w io.Writer) error {
	v := q.values()
	v.Set("format", "csv")
	_, err := c.download(ctx, "/api/v1/billing/"+what, v, "text/csv", w)
	return err
}

// Budget is a project's GPU quota and spend budget with current use.
type Budget struct {
	ProjectID            string `json:"project_id"`
	OrgID                string `json:"org_id"`
	GPUQuota             *int64 `json:"gpu_quota"`
	SpendLimitMicros     *int64 `json:"spend_limit_micros"`
	Currency             string `json:"currency"`
	Period               string `json:"period"`
	SoftThresholdPercent int    `json:"soft_threshold_percent"`
	GPUsInUse            int64  `json:"gpus_in_use"`
	SpendMicros          int64  `json:"spend_micros"`
	PeriodStart          string `json:"period_start"`
	PeriodEnd            string `json:"period_end"`
	UpdatedBy            string `json:"updated_by"`
	UpdatedAt            string `json:"updated_at"`
}

// BudgetInput sets a budget; nil limits mean none.
type BudgetInput struct {
	GPUQuota             *int64 `json:"gpu_quota"`
	SpendLimitMicros     *int64 `json:"spend_limit_micros"`
	Currency             string `json:"currency,omitempty"` // the platform's one currency
	Period               string `json:"period,omitempty"`
	SoftThresholdPercent *int   `json:"soft_threshold_percent,omitempty"`
}

// GetBudget reads a project's budget.
//
// Operation: getProjectBudget
func (c *Client) GetBudget(ctx context.Context, projectID string) (Budget, error) {
	var out Budget
	return out, c.Do(ctx, "GET", "/api/v1/projects/"+url.PathEscape(projectID)+"/billing/budget", nil, nil, &out)
}

// PutBudget sets a project's budget.
//
// Operation: putProjectBudget
func (c *Client) PutBudget(ctx context.Context, projectID string, in BudgetInput) (Budget, error) {
	var out Budget
	return out, c.Do(ctx, "PUT", "/api/v1/projects/"+url.PathEscape(projectID)+"/billing/budget", nil, in, &out)
}

// Price is a price version.
type Price struct {
	ID              string `json:"id"`
	UsageSource     string `json:"usage_source"`
	SKU             string `json:"sku"`
	Meter           string `json:"meter"`
	UsageUnit       string `json:"usage_unit"`
	Version         int    `json:"version"`
	UnitPriceMicros int64  `json:"unit_price_micros"`
	PerQuantity     int64  `json:"per_quantity"`
	Currency        string `json:"currency"`
	EffectiveFrom   string `json:"effective_from"`
	Note            string `json:"note"`
	CreatedBy       string `json:"created_by"`
	CreatedAt       string `json:"created_at"`
}

// PriceInput adds a price version.
type PriceInput struct {
	UsageSource     string `json:"usage_source"`
	SKU             string `json:"sku,omitempty"`
	Meter           string `json:"meter,omitempty"`
	UsageUnit       string `json:"usage_unit,omitempty"`
	UnitPriceMicros int64  `json:"unit_price_micros"`
	PerQuantity     int64  `json:"per_quantity,omitempty"`
	Currency        string `json:"currency,omitempty"` // the platform's one currency
	EffectiveFrom   string `json:"effective_from,omitempty"`
	Note            string `json:"note,omitempty"`
}

// CreatePrice adds a price version (platform admins).
//
// Operation: createBillingPrice
func (c *Client) CreatePrice(ctx context.Context, in PriceInput) (Price, error) {
	var out Price
	return out, c.Do(ctx, "POST", "/api/v1/admin/billing/prices", nil, in, &out)
}

// ListPrices lists price versions.
//
// Operation: listBillingPrices
func (c *Client) ListPrices(ctx context.Context, limit int, cursor string) (CatalogPage[Price], error) {
	var out CatalogPage[Price]
	return out, c.Do(ctx, "GET", "/api/v1/admin/billing/prices", BillingQuery{Limit: limit, Cursor: cursor}.values(), nil, &out)
}

// CorrectLedgerEntry posts a compensating entry linked to entryID.
//
// Operation: correctLedgerEntry
func (c *Client) CorrectLedgerEntry(ctx context.Context, entryID string, amountMicros int64, reason string) (LedgerEntry, error) {
	var out LedgerEntry
	return out, c.Do(ctx, "POST", "/api/v1/admin/billing/ledger/"+url.PathEscape(entryID)+"/corrections", nil,
		correctionRequest{AmountMicros: amountMicros, Reason: reason}, &out)
}

type correctionRequest struct {
	AmountMicros int64  `json:"amount_micros"`
	Reason       string `json:"reason"`
}

// UnratedUsage is a usage record the ledger holds no charge for, and why.
type UnratedUsage struct {
	UsageRecord UsageRecord `json:"usage_record"`
	Reason      string      `json:"reason"` // no_price | amount_overflow | rating_failed | pending
	Detail      string      `json:"detail"`
	ParkedAt    string      `json:"parked_at,omitempty"`
}

// UnratedUsageList is one page of unrated usage and the count of all
// unrated records by reason.
type UnratedUsageList struct {
	Items      []UnratedUsage   `json:"items"`
	NextCursor string           `json:"next_cursor"`
	Counts     map[string]int64 `json:"counts"`
}

// ListUnratedUsage lists usage records with no charge, and why (operators).
//
// Operation: listUnratedUsage
func (c *Client) ListUnratedUsage(ctx context.Context, o CatalogListOptions) (UnratedUsageList, error) {
	var out UnratedUsageList
	return out, c.Do(ctx, "GET", "/api/v1/admin/billing/unrated-usage", o.query(), nil, &out)
}

// UsageEvent is what a workload reports: one measurement, sent as a
// CloudEvents 1.0 event. ID must be unique per Source; a repeat is
// answered as a duplicate and never counted twice, so retries are safe.
type UsageEvent struct {
	ID, Source string
	UsageUnit  string
	Quantity   int64
	Time       time.Time // end of the measured interval
	StartTime  time.Time // optional
}

// UsageResult is the answer to a usage report.
type UsageResult struct {
	Recorded   int `json:"recorded"`
	Duplicates int `json:"duplicates"`
	Results    []struct {
		ID            string `json:"id"`
		Source        string `json:"source"`
		Status        string `json:"status"`
		UsageRecordID string `json:"usage_record_id,omitempty"`
	} `json:"results"`
}

// UsageCloudEvent is a usage measurement as it travels: a CloudEvents 1.0
// envelope (ReportUsage builds them from UsageEvents).
type UsageCloudEvent struct {
	SpecVersion     string    `json:"specversion"` // 1.0
	ID              string    `json:"id"`
	Source          string    `json:"source"`
	Type            string    `json:"type"` // gpuaas.usage.v1
	Subject         string    `json:"subject,omitempty"`
	Time            string    `json:"time,omitempty"`
	DataContentType string    `json:"datacontenttype,omitempty"`
	ProjectID       string    `json:"projectid,omitempty"`
	CorrelationID   string    `json:"correlationid,omitempty"`
	Data            UsageData `json:"data"`
}

// UsageData is the measurement of a UsageCloudEvent.
type UsageData struct {
	UsageUnit string `json:"usage_unit"`
	Quantity  int64  `json:"quantity"`
	StartTime string `json:"start_time,omitempty"`
}

// ReportUsage posts events as one CloudEvents batch for an app instance,
// with the instance's own service-account token. The answer comes after
// the events are committed. The server records each event once by its
// source and id, so a RetryPolicy sends the batch again after a 503.
//
// Operation: reportAppUsage
func (c *Client) ReportUsage(ctx context.Context, projectID, instanceID string, events []UsageEvent) (UsageResult, error) {
	batch := make([]UsageCloudEvent, len(events))
	for i, e := range events {
		ev := UsageCloudEvent{SpecVersion: "1.0", ID: e.ID, Source: e.Source, Type: "gpuaas.usage.v1", Subject: instanceID,
			DataContentType: "application/json", Data: UsageData{UsageUnit: e.UsageUnit, Quantity: e.Quantity}}
		if !e.StartTime.IsZero() {
			ev.Data.StartTime = e.StartTime.UTC().Format(time.RFC3339Nano)
		}
		if !e.Time.IsZero() {
			ev.Time = e.Time.UTC().Format(time.RFC3339Nano)
		}
		batch[i] = ev
	}
	var out UsageResult
	return out, c.postCloudEvents(ctx, instancePath(projectID, instanceID)+"/usage", batch, &out, 64<<20, dedupedByEventID)
}

// postCloudEvents posts batch as one CloudEvents batch
// (application/cloudevents-batch+json) to path and decodes the answer, at
// most limit bytes, into out.
func (c *Client) postCloudEvents(ctx context.Context, path string, batch any, out any, limit int64, opts ...RequestOption) error {
	body, err := json.Marshal(batch)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	c.authorize(req)
	req.Header.Set("Content-Type", "application/cloudevents-batch+json")
	for _, o := range opts {
		o(req)
	}
	return c.send(req, out, limit)
}
