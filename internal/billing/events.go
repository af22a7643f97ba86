package billing

import (
	"strconv"
	"time"
)

// Event types billing emits through the outbox, so an external billing
// system can follow usage and money without reading the database.
const (
	EventUsageRecorded          = "billing.usage.recorded"
	EventLedgerEntryPosted      = "billing.ledger.entry_posted"
	EventPriceCreated           = "billing.price.created"
	EventBudgetUpdated          = "billing.budget.updated"
	EventBudgetThresholdCrossed = "billing.budget.threshold_crossed"
)

// usageRecordedData is one record in a billing.usage.recorded event.
type usageRecordedData struct {
	UsageRecordID     string `json:"usage_record_id"`
	UsageSource       string `json:"usage_source"`
	UsageUnit         string `json:"usage_unit"`
	Quantity          int64  `json:"quantity"`
	SKU               string `json:"sku,omitempty"`
	Meter             string `json:"meter,omitempty"`
	AppInstanceID     string `json:"app_instance_id,omitempty"`
	AllocationID      string `json:"allocation_id,omitempty"`
	AppSlug           string `json:"app_slug,omitempty"`
	OperatingMode     string `json:"operating_mode,omitempty"`
	ControlPlaneScope string `json:"control_plane_scope,omitempty"`
	RuntimeBackend    string `json:"runtime_backend,omitempty"`
	StartTime         string `json:"start_time"`
	EndTime           string `json:"end_time"`
	EventSource       string `json:"event_source,omitempty"`
	EventID           string `json:"event_id,omitempty"`
}

func usageData(r UsageRecord) usageRecordedData {
	return usageRecordedData{UsageRecordID: r.ID, UsageSource: r.UsageSource, UsageUnit: r.UsageUnit, Quantity: r.Quantity,
		SKU: r.SKU, Meter: r.Meter, AppInstanceID: r.AppInstanceID, AllocationID: r.AllocationID, AppSlug: r.AppSlug,
		OperatingMode: r.OperatingMode, ControlPlaneScope: r.ControlPlaneScope, RuntimeBackend: r.RuntimeBackend,
		StartTime: rfc(r.StartTime), EndTime: rfc(r.EndTime), EventSource: r.EventSource, EventID: r.EventID}
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func itoa(i int) string { return strconv.Itoa(i) }

// maxRecordsPerEvent bounds one billing.usage.recorded event of a usage
// post: a record is at most ~1.4 KB (ids and source are bounded at
// ingest), so an event stays well inside storage.MaxEventDataBytes.
const maxRecordsPerEvent = 100

// reportedBatch is the data of a billing.usage.recorded event of one usage
// post: the attribution once, then up to maxRecordsPerEvent new records
// compactly (one post holds one instance's events in one unit; a larger
// post emits several events). Duplicates are not in it.
type reportedBatch struct {
	UsageSource       string           `json:"usage_source"`
	UsageUnit         string           `json:"usage_unit"`
	Meter             string           `json:"meter"`
	AppInstanceID     string           `json:"app_instance_id"`
	AppSlug           string           `json:"app_slug"`
	OperatingMode     string           `json:"operating_mode"`
	ControlPlaneScope string           `json:"control_plane_scope"`
	RuntimeBackend    string           `json:"runtime_backend"`
	Records           []reportedRecord `json:"records"`
}

type reportedRecord struct {
	UsageRecordID string `json:"usage_record_id"`
	EventSource   string `json:"event_source"`
	EventID       string `json:"event_id"`
	Quantity      int64  `json:"quantity"`
	StartTime     string `json:"start_time"`
	EndTime       string `json:"end_time"`
}
