// Package billing turns what the platform and its apps measure into money:
// usage records in one shape for every source, a versioned price table, an
// append-only ledger rated from usage, and per-project budgets and GPU
// quotas enforced when capacity or an app instance is launched.
//
// The package knows allocations and app instances only through the narrow
// interfaces below; the nodes and instances domains implement them.
package billing

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/ratelimit"
)

// Instance is what billing needs to know about an app instance: its
// attribution, the identity the workload runs as, and the metering
// dimension its version's manifest declares.
type Instance struct {
	ID                string
	OrgID             string
	ProjectID         string
	AppSlug           string
	Version           string
	OperatingMode     string
	ControlPlaneScope string
	RuntimeBackend    string
	// ServiceAccountID is the project service account the workload runs
	// as; only its tokens may report usage for the instance.
	ServiceAccountID string
	// MeteringKind is the manifest's metering.kind ("" or "none": none).
	MeteringKind string
}

// Shared reports whether other projects use the instance (a tenant-shared
// or platform-managed instance, with attachments): its usage events may
// name the attached project they served.
func (i Instance) Shared() bool {
	return i.ControlPlaneScope == "tenant" || i.OperatingMode == "platform_managed"
}

// InstanceDirectory resolves app instances. It returns an error matching
// storage.ErrNotFound for an unknown id.
type InstanceDirectory interface {
	BillingInstance(ctx context.Context, q Queries, instanceID string) (Instance, error)
}

// AllocationInterval is one active interval of an allocation: GPU-seconds
// accrue from Start to End (zero End: still active).
type AllocationInterval struct {
	ID           string
	AllocationID string
	OrgID        string
	ProjectID    string
	SKU          string
	GPUCount     int64
	Start, End   time.Time
}

// AllocationIntervalSource lists allocation intervals that are open or
// ended at or after since.
type AllocationIntervalSource interface {
	AllocationIntervals(ctx context.Context, q Queries, since time.Time) ([]AllocationInterval, error)
}

// InstanceInterval is one running interval of an app instance.
type InstanceInterval struct {
	ID         string
	InstanceID string
	Start, End time.Time
}

// InstanceIntervalSource lists instance running intervals that are open or
// ended at or after since.
type InstanceIntervalSource interface {
	RunningIntervals(ctx context.Context, q Queries, since time.Time) ([]InstanceInterval, error)
}

// GPUCounter counts the GPUs a project holds now across its live
// allocations (pending, active, releasing — whatever still occupies GPUs).
type GPUCounter interface {
	ProjectGPUs(ctx context.Context, q Queries, projectID string) (int64, error)
}

// Sources are the interfaces other domains implement. Any may be nil until
// its domain is wired: no allocation source means no GPU-seconds are
// metered, no GPU counter means no GPU quota can be enforced.
type Sources struct {
	Instances           InstanceDirectory
	AllocationIntervals AllocationIntervalSource
	InstanceIntervals   InstanceIntervalSource
	GPUs                GPUCounter
}

// Config holds the billing knobs (see internal/config).
type Config struct {
	// Currency is the one currency of prices, budgets and the ledger.
	Currency string
	// MaxEventAge is how late an app usage event may arrive.
	MaxEventAge time.Duration
	// MaxClockSkew is how far in the future an event's time may be.
	MaxClockSkew time.Duration
	// SliceLength cuts long intervals into usage records: an open
	// interval is recorded slice by slice as each slice ends.
	SliceLength time.Duration
	// Lookback bounds how far back the metering worker looks for intervals
	// that ended while it was not running.
	Lookback time.Duration
	// MaxBatchEvents caps the events of one batch request.
	MaxBatchEvents int
	// UsageEventRate and UsageEventBurst limit the usage events one
	// instance may report to this replica (usagelimit.go): events a
	// second, and at once; a rate of 0 takes every event.
	UsageEventRate  float64
	UsageEventBurst int
}

// DefaultConfig is what the server uses unless configured otherwise.
func DefaultConfig() Config {
	return Config{Currency: "USD", MaxEventAge: 72 * time.Hour, MaxClockSkew: 5 * time.Minute,
		SliceLength: time.Hour, Lookback: 31 * 24 * time.Hour, MaxBatchEvents: 10_000}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Currency == "" {
		c.Currency = d.Currency
	}
	if c.MaxEventAge <= 0 {
		c.MaxEventAge = d.MaxEventAge
	}
	if c.MaxClockSkew <= 0 {
		c.MaxClockSkew = d.MaxClockSkew
	}
	if c.SliceLength <= 0 {
		c.SliceLength = d.SliceLength
	}
	if c.Lookback <= 0 {
		c.Lookback = d.Lookback
	}
	if c.MaxBatchEvents <= 0 {
		c.MaxBatchEvents = d.MaxBatchEvents
	}
	return c
}

// Deps are what the billing service needs.
type Deps struct {
	Store  Store
	IAM    *iam.Service
	Logger *slog.Logger
	Now    func() time.Time
	Config Config
}

// Service is the billing domain.
type Service struct {
	Deps
	sources atomic.Pointer[Sources]
	// rated is called after usage is recorded, to rate it soon (the
	// server wires the rating worker's Kick here).
	rated atomic.Pointer[func()]
	// unpriced is how many records the last complete rating run left
	// waiting for a price.
	unpriced atomic.Int64
	// usageLimit is each instance's ingest budget (nil: no limit).
	usageLimit *ratelimit.Keyed
}

// New builds the service.
func New(d Deps) *Service {
	d.Now = clock.Or(d.Now)
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	d.Config = d.Config.withDefaults()
	s := &Service{Deps: d, usageLimit: ratelimit.New(d.Config.UsageEventRate, d.Config.UsageEventBurst, maxLimitedInstances)}
	s.SetSources(Sources{})
	return s
}

// SetSources installs the other domains' implementations; safe while
// serving (domains built after billing wire themselves in here).
func (s *Service) SetSources(src Sources) { s.sources.Store(&src) }

// UpdateSources changes some sources, keeping the others.
func (s *Service) UpdateSources(fn func(*Sources)) {
	cur := *s.sources.Load()
	fn(&cur)
	s.sources.Store(&cur)
}

func (s *Service) src() Sources { return *s.sources.Load() }

// OnUsageRecorded sets what to call after usage is recorded.
func (s *Service) OnUsageRecorded(fn func()) { s.rated.Store(&fn) }

func (s *Service) usageRecorded() {
	if p := s.rated.Load(); p != nil && *p != nil {
		(*p)()
	}
}
