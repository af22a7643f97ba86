package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// HeartbeatsOverdue returns at most limit instances, the earliest due: it
// read one more (the pagination helper's look-ahead row), so the sweep
// worked past its bound.
func TestHeartbeatsOverdueHonoursLimit(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		s := store.Instances(db)
		q := s.Read()
		o, p := tenant(t, db, "hb-limit")
		var ids []string
		for k := range 3 {
			i := mkInstance(t, s, newInstance(o, p, "hb-limit", "1", instances.StatusRunning))
			noErr(t, "due", q.UpdateAppInstanceHealth(ctx, i.ID, instances.Health{State: instances.HealthHealthy,
				HeartbeatTimeoutSeconds: 10, HeartbeatDueAt: at(time.Duration(k+1) * time.Second)}))
			ids = append(ids, i.ID)
		}
		for limit := 1; limit <= 3; limit++ {
			got, err := q.HeartbeatsOverdue(ctx, at(time.Minute), 3600, limit)
			noErr(t, "overdue", err)
			same(t, "overdue with a limit", instanceIDs(got), ids[:limit])
		}
	})
}
