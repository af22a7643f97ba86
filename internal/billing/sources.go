package billing

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/store"
)

// Allocations reads the nodes domain's allocation tables: the active
// intervals GPU-seconds are metered from, and the GPUs a project holds for
// the quota. It implements AllocationIntervalSource and GPUCounter.
type Allocations struct{}

// AllocationIntervals implements AllocationIntervalSource.
func (Allocations) AllocationIntervals(ctx context.Context, q *store.Queries, since time.Time) ([]AllocationInterval, error) {
	ivs, err := q.AllocationIntervalsSince(ctx, since)
	if err != nil {
		return nil, err
	}
	out := make([]AllocationInterval, len(ivs))
	for i, iv := range ivs {
		out[i] = AllocationInterval{ID: iv.ID, AllocationID: iv.AllocationID, OrgID: iv.OrgID, ProjectID: iv.ProjectID,
			SKU: iv.SKU, GPUCount: int64(iv.GPUCount), Start: iv.StartedAt, End: iv.EndedAt}
	}
	return out, nil
}

// ProjectGPUs implements GPUCounter.
func (Allocations) ProjectGPUs(ctx context.Context, q *store.Queries, projectID string) (int64, error) {
	return q.ProjectHeldGPUs(ctx, projectID)
}

// CheckAllocation is the launch gate the nodes domain calls while placing
// an allocation of gpus GPUs.
func (s *Service) CheckAllocation(ctx context.Context, q *store.Queries, projectID string, gpus int) error {
	return s.CheckLaunch(ctx, q, LaunchCheck{ProjectID: projectID, GPUs: int64(gpus), What: "allocation"})
}
