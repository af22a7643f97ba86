package billing

import (
	"context"
	"math/big"
	"time"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// Usage sources: what produced a usage record.
const (
	UsageSourceAllocation = "allocation"  // GPU-seconds of an allocation's active intervals
	UsageSourceAppRuntime = "app_runtime" // an app's own dimension (session seconds, tokens, …)
)

// UsageRecord is one metered quantity, in the one shape every source uses.
// DedupeKey makes recording idempotent: a second record with the same key is
// a duplicate and is not stored.
type UsageRecord struct {
	ID                string
	DedupeKey         string
	OrgID             string
	ProjectID         string
	AppInstanceID     string
	AllocationID      string
	AppSlug           string
	OperatingMode     string
	ControlPlaneScope string
	RuntimeBackend    string
	CorrelationID     string
	UsageSource       string
	UsageUnit         string
	Quantity          int64
	SKU               string
	Meter             string
	StartTime         time.Time
	EndTime           time.Time
	EventSource       string
	EventID           string
	RecordedAt        time.Time
}

// UsageFilter narrows usage and ledger reads; empty fields do not filter.
// ProjectIDs, when non-nil, limits the read to those projects (the ones the
// caller may see); an empty non-nil slice matches nothing.
type UsageFilter struct {
	OrgID         string
	ProjectID     string
	ProjectIDs    []string
	AppInstanceID string
	UsageSource   string
	UsageUnit     string
	From, To      time.Time // on the usage time (start_time)
}

// UsageGroupColumns are the columns usage and ledger totals may be grouped by.
var UsageGroupColumns = []string{"project_id", "app_instance_id", "allocation_id", "app_slug", "usage_source", "usage_unit", "sku", "meter"}

// LedgerGroupColumns are the columns ledger totals may be grouped by.
var LedgerGroupColumns = []string{"project_id", "app_instance_id", "usage_source", "usage_unit", "sku", "meter", "entry_type"}

// UsageGroup is one row of a grouped usage total.
type UsageGroup struct {
	Keys     map[string]string
	Quantity *big.Int // exact: sums of many records exceed 64 bits
	Records  int64
}

// ParkedUsage says why rating set a usage record aside.
type ParkedUsage struct {
	UsageRecordID string
	OrgID         string
	ProjectID     string
	Reason        string
	Detail        string
	ParkedAt      time.Time
}

// UnratedRow is a usage record with no charge, as stored, and why it was
// parked (Parked.Reason is empty when it was not).
type UnratedRow struct {
	Record UsageRecord
	Parked ParkedUsage
}

// Price is one version of the price of a SKU (allocation GPU-seconds) or a
// meter (an app's unit).
type Price struct {
	ID              string
	UsageSource     string
	SKU             string
	Meter           string
	UsageUnit       string
	Version         int
	UnitPriceMicros int64
	PerQuantity     int64
	Currency        string
	EffectiveFrom   time.Time
	Note            string
	CreatedBy       string
	CreatedAt       time.Time
}

// Ledger entry types.
const (
	EntryCharge     = "charge"
	EntryCorrection = "correction"
)

// LedgerEntry is one append-only line of the ledger. Amounts are integer
// micro-units of Currency; a correction's amount has the sign that
// compensates (negative to refund).
type LedgerEntry struct {
	ID              string
	OrgID           string
	ProjectID       string
	EntryType       string
	UsageRecordID   string
	CorrectsEntryID string
	AppInstanceID   string
	UsageSource     string
	UsageUnit       string
	SKU             string
	Meter           string
	Quantity        int64
	PriceID         string
	UnitPriceMicros int64
	PerQuantity     int64
	AmountMicros    int64
	Currency        string
	Reason          string
	UsageTime       time.Time
	CreatedBy       string
	CreatedAt       time.Time
}

// LedgerGroup is one row of grouped ledger totals.
type LedgerGroup struct {
	Keys         map[string]string
	Currency     string
	AmountMicros *big.Int // exact: sums of many entries exceed 64 bits
	Entries      int64
}

// Budget is a project's cost controls. A nil limit means none.
type Budget struct {
	ProjectID            string
	OrgID                string
	GPUQuota             *int64
	SpendLimitMicros     *int64
	Currency             string
	Period               string // day | month
	SoftThresholdPercent int
	UpdatedBy            string
	CreatedAt            time.Time
	UpdatedAt            time.Time
}

// MeteredInterval is how far the metering worker has turned one interval
// into usage records.
type MeteredInterval struct {
	Kind         string // allocation | instance
	IntervalID   string
	MeteredUntil time.Time
	ClosedAt     time.Time // zero while the interval is open
}

// InstanceStatus is an app instance's lifecycle status as its timeline
// records it; metering cares only whether the workload serves.
type InstanceStatus string

// The statuses during which an instance's workload serves: a session runs
// through upgrades and rollbacks.
const (
	InstanceRunning     InstanceStatus = "running"
	InstanceUpgrading   InstanceStatus = "upgrading"
	InstanceRollingBack InstanceStatus = "rolling_back"
)

// InstanceStatusChange is one lifecycle row of an app instance's timeline:
// the status it entered, and when.
type InstanceStatusChange struct {
	InstanceID string
	EventID    string
	Status     InstanceStatus
	At         time.Time
}

// InstanceRecord is what billing reads of an app instance's rows: its
// attribution and workload identity (MeteringKind unset), and the canonical
// manifest of its version (nil when the version is gone).
type InstanceRecord struct {
	Instance Instance
	Manifest []byte
}

// Queries is what the billing domain reads and writes.
type Queries interface {
	// Usage records.
	InsertUsageRecords(ctx context.Context, recs []UsageRecord) (map[string]bool, error)
	// UsageKeyOwners returns, for each of keys a record is stored under,
	// that record's app instance ("" for a record of no instance).
	UsageKeyOwners(ctx context.Context, keys []string) (map[string]string, error)
	ListUsage(ctx context.Context, f UsageFilter, p storage.Page) ([]UsageRecord, string, error)
	GroupUsage(ctx context.Context, f UsageFilter, by []string) ([]UsageGroup, error)
	// UnratedUsage reads the rating queue a window of limit entries at a
	// time: the records of the window to rate, and the cursor of the next
	// window ("" at the end).
	UnratedUsage(ctx context.Context, afterID string, limit int) (recs []UsageRecord, next string, err error)
	ParkUsage(ctx context.Context, p ParkedUsage) (bool, error)
	ListUnratedUsage(ctx context.Context, p storage.Page) ([]UnratedRow, string, error)
	CountParkedUsage(ctx context.Context) (map[string]int64, error)

	// Prices.
	InsertPrice(ctx context.Context, p Price) error
	LatestPriceVersion(ctx context.Context, source, sku, meter string) (int, error)
	PriceAt(ctx context.Context, source, sku, meter string, t time.Time) (Price, error)
	ListPrices(ctx context.Context, p storage.Page) ([]Price, string, error)

	// Ledger.
	InsertLedgerEntry(ctx context.Context, e LedgerEntry) error
	InsertCharge(ctx context.Context, e LedgerEntry) (bool, error)
	GetLedgerEntry(ctx context.Context, id string) (LedgerEntry, error)
	ListLedger(ctx context.Context, f UsageFilter, p storage.Page) ([]LedgerEntry, string, error)
	GroupLedger(ctx context.Context, f UsageFilter, by []string) ([]LedgerGroup, error)
	ProjectSpend(ctx context.Context, projectID string, from, to time.Time) (int64, error)

	// Budgets.
	GetBudget(ctx context.Context, projectID string) (Budget, error)
	LockBudget(ctx context.Context, projectID string) (Budget, error)
	PutBudget(ctx context.Context, b Budget) error
	RecordThresholdCrossing(ctx context.Context, projectID string, periodStart time.Time, level string, at time.Time) (bool, error)

	// Metering progress.
	MeteredIntervals(ctx context.Context, kind string, ids []string) (map[string]MeteredInterval, error)
	PutMeteredInterval(ctx context.Context, m MeteredInterval) error

	// Metering's sources: reads of the nodes domain's allocation tables
	// and the app-instances domain's tables.
	AllocationIntervalsSince(ctx context.Context, since time.Time) ([]AllocationInterval, error)
	ProjectHeldGPUs(ctx context.Context, projectID string) (int64, error)
	InstanceStatusChanges(ctx context.Context, since time.Time) ([]InstanceStatusChange, error)
	InstanceForBilling(ctx context.Context, instanceID string) (InstanceRecord, error)
	// AttachedProjectOrg returns the org of a project attached to a shared
	// instance; ErrNotFound when it is not attached.
	AttachedProjectOrg(ctx context.Context, instanceID, projectID string) (string, error)
}

// Tx is a mutation as the billing domain sees it.
type Tx interface {
	storage.Tx
	Queries
}

// Store is the billing domain's storage.
type Store = storage.Store[Tx, Queries]
