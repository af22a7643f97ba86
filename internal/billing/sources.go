package billing

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// Allocations reads the nodes domain's allocation tables: the active
// intervals GPU-seconds are metered from, and the GPUs a project holds for
// the quota. It implements AllocationIntervalSource and GPUCounter.
type Allocations struct{}

// AllocationIntervals implements AllocationIntervalSource.
func (Allocations) AllocationIntervals(ctx context.Context, q Queries, since time.Time) ([]AllocationInterval, error) {
	return q.AllocationIntervalsSince(ctx, since)
}

// ProjectGPUs implements GPUCounter.
func (Allocations) ProjectGPUs(ctx context.Context, q Queries, projectID string) (int64, error) {
	return q.ProjectHeldGPUs(ctx, projectID)
}

// CheckAllocation is the launch gate the nodes domain calls while placing
// an allocation of gpus GPUs; tx is the placing transaction, which the check
// joins.
func (s *Service) CheckAllocation(ctx context.Context, tx storage.Tx, projectID string, gpus int) error {
	return s.CheckLaunch(ctx, s.Store.Join(tx), LaunchCheck{ProjectID: projectID, GPUs: int64(gpus), What: "allocation"})
}

// Instances reads the app-instances domain's tables: an instance's
// attribution and workload identity, the metering its version's manifest
// declares, and its running intervals. It implements InstanceDirectory and
// InstanceIntervalSource.
type Instances struct{}

// BillingInstance implements InstanceDirectory.
func (Instances) BillingInstance(ctx context.Context, q Queries, instanceID string) (Instance, error) {
	r, err := q.InstanceForBilling(ctx, instanceID)
	if err != nil {
		return Instance{}, err
	}
	out := r.Instance
	out.MeteringKind = meteringKind(r.Manifest) // no version (nil), no declared metering
	return out, nil
}

// meteringKind reads metering.kind from a version's canonical manifest.
func meteringKind(manifestJSON []byte) string {
	var m struct {
		Metering *struct {
			Kind string `json:"kind"`
		} `json:"metering"`
	}
	if json.Unmarshal(manifestJSON, &m) != nil || m.Metering == nil {
		return ""
	}
	return m.Metering.Kind
}

// servingStatuses are the instance statuses during which its workload
// serves: a session runs through upgrades and rollbacks.
var servingStatuses = map[InstanceStatus]bool{InstanceRunning: true, InstanceUpgrading: true, InstanceRollingBack: true}

// RunningIntervals implements InstanceIntervalSource: an interval opens
// when an instance enters a serving status and closes when it leaves them
// (decommissioning, failed, …). Its id is the id of the timeline row that
// opened it, so the same interval always has the same id.
func (Instances) RunningIntervals(ctx context.Context, q Queries, since time.Time) ([]InstanceInterval, error) {
	changes, err := q.InstanceStatusChanges(ctx, since)
	if err != nil {
		return nil, err
	}
	var out []InstanceInterval
	var open *InstanceInterval
	flush := func() {
		if open != nil {
			out = append(out, *open)
			open = nil
		}
	}
	for i, c := range changes {
		if i > 0 && c.InstanceID != changes[i-1].InstanceID {
			flush()
		}
		switch {
		case servingStatuses[c.Status] && open == nil:
			open = &InstanceInterval{ID: c.EventID, InstanceID: c.InstanceID, Start: c.At}
		case !servingStatuses[c.Status] && open != nil:
			open.End = c.At
			flush()
		}
	}
	flush()
	return out, nil
}

// CheckInstance is the launch gate the instances domain calls while
// recording a new app instance: it holds no GPUs of its own (it runs on an
// allocation), so only the spend budget applies. tx is the recording
// transaction, which the check joins; nil checks outside any transaction
// (a launch preview).
func (s *Service) CheckInstance(ctx context.Context, tx storage.Tx, projectID, appSlug string) error {
	var q Queries = s.Store.Read()
	if tx != nil {
		q = s.Store.Join(tx)
	}
	return s.CheckLaunch(ctx, q, LaunchCheck{ProjectID: projectID, What: "app instance of " + appSlug})
}
