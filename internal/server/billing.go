package server

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// billingParts is the billing domain and its two background jobs: the
// metering worker turns allocation and instance intervals into usage
// records; the rating worker turns usage into ledger charges. Both are
// idempotent, so every replica may run them.
type billingParts struct {
	svc           *billing.Service
	meter, rating *worker.Periodic
}

func newBillingParts(cfg config.Config, db *store.DB, svc *iam.Service, now func() time.Time) *billingParts {
	b := &billingParts{svc: billing.New(billing.Deps{Store: store.Billing(db), IAM: svc, Logger: svc.Logger, Now: now, Config: billing.Config{
		Currency: cfg.BillingCurrency, MaxEventAge: cfg.BillingMaxEventAge, SliceLength: cfg.BillingSlice,
		UsageEventRate: cfg.UsageEventRate, UsageEventBurst: cfg.UsageEventBurst,
	}})}
	log := svc.Logger.With("component", "billing")
	b.meter = &worker.Periodic{Name: "billing-meter", Interval: cfg.BillingMeterInterval, Logger: log,
		Run: func(ctx context.Context) error { _, err := b.svc.Meter(ctx); return err }}
	b.rating = &worker.Periodic{Name: "billing-rate", Interval: cfg.BillingMeterInterval, Logger: log,
		Run: func(ctx context.Context) error { _, err := b.svc.Rate(ctx); return err }}
	b.svc.UpdateSources(func(src *billing.Sources) {
		src.AllocationIntervals, src.GPUs = billing.Allocations{}, billing.Allocations{}
		src.Instances, src.InstanceIntervals = billing.Instances{}, billing.Instances{}
	})
	// Rate soon after usage arrives, not only on the next tick; metering
	// kicks rating too, so a closed interval is charged promptly.
	b.svc.OnUsageRecorded(b.rating.Kick)
	return b
}

// Billing is the billing domain, for the wiring of other domains (their
// launch paths call its budget check) and for tests.
func (a *App) Billing() *billing.Service { return a.billing.svc }

// BillingWorkers are the metering and rating jobs (tests wait on their runs).
func (a *App) BillingWorkers() (meter, rating *worker.Periodic) {
	return a.billing.meter, a.billing.rating
}
