package billing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// BenchmarkIngest measures sustained app usage ingest — parse, durable
// dedupe, the audit row and the outbox event, committed before the answer —
// one event per request and 100 per batch, beside the raw insert rate of
// the same table on the same database in the same run: the same rows, with
// the same keys, in multi-row INSERTs of 100 rows per transaction, but no
// conflict check, no audit row and no event. Run with:
//
//	GPUAAS_TEST_DATABASE_URL=postgres://… go test -run '^$' -bench BenchmarkIngest -benchtime 20000x ./internal/billing/
func BenchmarkIngest(b *testing.B) {
	storetest.EachDialect(b, func(b *testing.B, d store.Dialect) {
		db := storetest.Open(b, d)
		s := billing.New(billing.Deps{Store: store.Billing(db)})
		inst := billing.Instance{ID: iam.NewID(), OrgID: iam.NewID(), ProjectID: iam.NewID(), AppSlug: "vllm", Version: "1.0.0",
			OperatingMode: "tenant_dedicated", ControlPlaneScope: "project", RuntimeBackend: "launchable_oci",
			ServiceAccountID: iam.NewID(), MeteringKind: billing.KindTokens}
		ctx := principal.With(correlation.With(context.Background(), "bench"), principal.Principal{Type: principal.ServiceAccount, ID: inst.ServiceAccountID})
		seq := 0
		body := func(n int) []byte {
			out := []byte{'['}
			for i := range n {
				if i > 0 {
					out = append(out, ',')
				}
				seq++
				out = fmt.Appendf(out, `{"specversion":"1.0","id":"ev-%d","source":"//vllm/%s","type":"gpuaas.usage.v1","data":{"usage_unit":"tokens","quantity":%d}}`,
					seq, inst.ID, seq%1000)
			}
			return append(out, ']')
		}
		ingest := func(b *testing.B, per int) {
			b.ResetTimer()
			for done := 0; done < b.N; done += per {
				evs, err := billing.ParseUsageEvents(body(per), true, time.Now())
				if err != nil {
					b.Fatal(err)
				}
				if err := s.CheckEvents(inst, evs); err != nil {
					b.Fatal(err)
				}
				res, err := s.StoreEvents(ctx, inst, evs)
				if err != nil || res.Recorded != per {
					b.Fatalf("recorded %d of %d: %v", res.Recorded, per, err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		}
		b.Run("single", func(b *testing.B) { ingest(b, 1) })
		b.Run("batch100", func(b *testing.B) { ingest(b, 100) })
		b.Run("raw_insert100", func(b *testing.B) {
			now := time.Now().UTC()
			b.ResetTimer()
			for done := 0; done < b.N; done += 100 {
				recs := make([]billing.UsageRecord, 100)
				for i := range recs {
					seq++
					recs[i] = billing.UsageRecord{ID: iam.NewID(), DedupeKey: billing.DedupeKeyForEvent(inst.ProjectID, "//vllm/"+inst.ID, fmt.Sprintf("raw-%d", seq)), OrgID: inst.OrgID,
						ProjectID: inst.ProjectID, AppInstanceID: inst.ID, AppSlug: inst.AppSlug, UsageSource: billing.UsageSourceAppRuntime,
						UsageUnit: "tokens", Quantity: 1, Meter: "vllm/tokens", StartTime: now, EndTime: now, RecordedAt: now}
				}
				if err := db.InTx(ctx, func(q *store.Queries) error { return q.InsertUsageRecordsPlain(ctx, recs) }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	})
}
