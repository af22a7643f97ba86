package billing

// The JSON shapes of billing's resources: the REST responses and the data
// of billing events are the same documents.

// UsageRecordView is a usage record as the API shows it.
type UsageRecordView struct {
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

// ViewUsage renders a usage record.
func ViewUsage(r UsageRecord) UsageRecordView {
	return UsageRecordView{ID: r.ID, OrgID: r.OrgID, ProjectID: r.ProjectID, AppInstanceID: r.AppInstanceID,
		AllocationID: r.AllocationID, AppSlug: r.AppSlug, OperatingMode: r.OperatingMode, ControlPlaneScope: r.ControlPlaneScope,
		RuntimeBackend: r.RuntimeBackend, CorrelationID: r.CorrelationID, UsageSource: r.UsageSource, UsageUnit: r.UsageUnit,
		Quantity: r.Quantity, SKU: r.SKU, Meter: r.Meter, StartTime: rfc(r.StartTime), EndTime: rfc(r.EndTime),
		EventSource: r.EventSource, EventID: r.EventID, RecordedAt: rfc(r.RecordedAt)}
}

// LedgerEntryView is a ledger entry as the API shows it.
type LedgerEntryView struct {
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

// ViewEntry renders a ledger entry.
func ViewEntry(e LedgerEntry) LedgerEntryView {
	return LedgerEntryView{ID: e.ID, OrgID: e.OrgID, ProjectID: e.ProjectID, EntryType: e.EntryType,
		UsageRecordID: e.UsageRecordID, CorrectsEntryID: e.CorrectsEntryID, AppInstanceID: e.AppInstanceID,
		UsageSource: e.UsageSource, UsageUnit: e.UsageUnit, SKU: e.SKU, Meter: e.Meter, Quantity: e.Quantity,
		PriceID: e.PriceID, UnitPriceMicros: e.UnitPriceMicros, PerQuantity: e.PerQuantity, AmountMicros: e.AmountMicros,
		Currency: e.Currency, Reason: e.Reason, UsageTime: rfc(e.UsageTime), CreatedBy: e.CreatedBy, CreatedAt: rfc(e.CreatedAt)}
}

// PriceView is a price version as the API shows it.
type PriceView struct {
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

// ViewPrice renders a price version.
func ViewPrice(p Price) PriceView {
	return PriceView{ID: p.ID, UsageSource: p.UsageSource, SKU: p.SKU, Meter: p.Meter, UsageUnit: p.UsageUnit,
		Version: p.Version, UnitPriceMicros: p.UnitPriceMicros, PerQuantity: p.PerQuantity, Currency: p.Currency,
		EffectiveFrom: rfc(p.EffectiveFrom), Note: p.Note, CreatedBy: p.CreatedBy, CreatedAt: rfc(p.CreatedAt)}
}

// BudgetView is a project's budget with its current use.
type BudgetView struct {
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
