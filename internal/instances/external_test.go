package instances

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// workerQueries answers the reads of an acquire that finds nothing: the
// caller is a worker of the app, holds nothing, and nothing is available.
// Each look is handed to look (the time it was asked at). Any other call
// panics (the embedded Queries is nil).
type workerQueries struct {
	Queries
	look func(now time.Time)
}

func (q *workerQueries) GetAppWorkerGrant(_ context.Context, appSlug, saID string) (AppWorkerGrant, error) {
	return AppWorkerGrant{AppSlug: appSlug, ServiceAccountID: saID}, nil
}

func (q *workerQueries) HeldWorkerOperation(context.Context, string, string, time.Time) (InstanceOperation, error) {
	return InstanceOperation{}, storage.ErrNotFound
}

func (q *workerQueries) AvailableWorkerOperations(_ context.Context, _ string, now time.Time, _ int) ([]InstanceOperation, error) {
	q.look(now)
	return nil, nil
}

type workerStore struct {
	Store
	q *workerQueries
}

func (s workerStore) Read() Queries { return s.q }

// An acquire that finds nothing answers "nothing" once its wait has passed
// in real time, whatever the service's clock says: before, its deadline
// was read from that clock, so a test clock held still kept the worker
// waiting until it hung up, and one moved on answered at once. The looks
// themselves still stamp with the service's clock.
func TestAcquireWaitsInRealTime(t *testing.T) {
	const wait = 200 * time.Millisecond
	for _, c := range []struct {
		name string
		at   time.Time
		step time.Duration // how far the clock moves at each look
	}{
		{"held still in the past", time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), 0},
		{"held still in the future", time.Date(2101, 1, 1, 0, 0, 0, 0, time.UTC), 0},
		{"moved on an hour at each look", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual(c.at)
			var mu sync.Mutex
			var stamps []time.Time
			q := &workerQueries{look: func(now time.Time) {
				mu.Lock()
				defer mu.Unlock()
				stamps = append(stamps, now)
				clk.Advance(c.step)
			}}
			s := New(Deps{Store: workerStore{q: q}, Now: clk.Now, DriveInterval: 20 * time.Millisecond})
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			ctx = principal.With(ctx, principal.Principal{Type: principal.ServiceAccount, ID: "sa-1"})

			start := time.Now()
			_, ok, err := s.Acquire(ctx, "echo", wait)
			took := time.Since(start)
			if err != nil || ok {
				t.Fatalf("acquire: ok %v, err %v; want nothing", ok, err)
			}
			if ctx.Err() != nil {
				t.Fatalf("acquire answered only when the caller gave up (%v), not after its wait of %v", took, wait)
			}
			if took < wait-10*time.Millisecond || took > 2*time.Second {
				t.Errorf("acquire answered nothing after %v; want about its wait of %v", took, wait)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(stamps) == 0 || !stamps[0].Equal(c.at.UTC()) {
				t.Errorf("looks stamped %v; want the service's clock (%v first)", stamps, c.at)
			}
		})
	}
}
