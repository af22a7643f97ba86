package billing

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Slice is one piece of an interval turned into a usage record. Slices are
// cut at fixed boundaries (multiples of the slice length since the Unix
// epoch), so the same interval always yields the same slices and a rerun
// finds each one already recorded.
type Slice struct {
	Start, End time.Time
	Final      bool // the last slice of a closed interval
}

// Slices cuts [from, end) into recordable slices as of now, at whole
// seconds. An open interval (zero end) yields only the slices that have
// fully passed; a closed one yields everything up to its end.
func Slices(from, end, now time.Time, length time.Duration) []Slice {
	from = from.Truncate(time.Second)
	open := end.IsZero()
	stop := end.Truncate(time.Second)
	if open {
		stop = now.Truncate(length) // the last boundary that has passed
	}
	var out []Slice
	for s := from; s.Before(stop); {
		e := s.Truncate(length).Add(length)
		if e.After(stop) {
			e = stop
		}
		out = append(out, Slice{Start: s, End: e, Final: !open && e.Equal(stop)})
		s = e
	}
	return out
}

func (s *Service) sliceKey(kind, intervalID string, start time.Time) string {
	return kind + ":" + intervalID + ":" + strconv.FormatInt(start.Unix(), 10)
}

// Meter turns allocation active intervals into GPU-seconds and the running
// intervals of instances whose manifest meters session_seconds into session
// seconds, and reports how many usage records it wrote. Each slice of an
// interval is recorded under a key of its own, so running Meter again, on
// any replica, never counts a second twice.
func (s *Service) Meter(ctx context.Context) (int, error) {
	ctx = systemContext(ctx)
	cid := correlation.ID(ctx)
	now := s.Now().UTC()
	since := now.Add(-s.Config.Lookback)
	src := s.src()
	var recs []UsageRecord
	var progress []MeteredInterval
	q := s.Store.Read()
	if src.AllocationIntervals != nil {
		ivs, err := src.AllocationIntervals.AllocationIntervals(ctx, q, since)
		if err != nil {
			return 0, err
		}
		ids := make([]string, len(ivs))
		for i, iv := range ivs {
			ids[i] = iv.ID
		}
		done, err := q.MeteredIntervals(ctx, "allocation", ids)
		if err != nil {
			return 0, err
		}
		for _, iv := range ivs {
			r, p := s.allocationRecords(iv, done[iv.ID], now, cid)
			recs = append(recs, r...)
			progress = append(progress, p...)
		}
	}
	if src.InstanceIntervals != nil && src.Instances != nil {
		ivs, err := src.InstanceIntervals.RunningIntervals(ctx, q, since)
		if err != nil {
			return 0, err
		}
		ids := make([]string, len(ivs))
		for i, iv := range ivs {
			ids[i] = iv.ID
		}
		done, err := q.MeteredIntervals(ctx, "instance", ids)
		if err != nil {
			return 0, err
		}
		instances := map[string]Instance{}
		for _, iv := range ivs {
			inst, ok := instances[iv.InstanceID]
			if !ok {
				inst, err = src.Instances.BillingInstance(ctx, q, iv.InstanceID)
				if errors.Is(err, storage.ErrNotFound) {
					continue
				}
				if err != nil {
					return 0, err
				}
				instances[iv.InstanceID] = inst
			}
			if inst.MeteringKind != KindSessionSeconds {
				continue
			}
			r, p := s.sessionRecords(inst, iv, done[iv.ID], now, cid)
			recs = append(recs, r...)
			progress = append(progress, p...)
		}
	}
	if len(progress) == 0 {
		return 0, nil
	}
	written := 0
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		stored, err := tx.InsertUsageRecords(ctx, recs)
		if err != nil {
			return err
		}
		written = len(stored)
		for _, r := range recs {
			if !stored[r.ID] {
				continue
			}
			subject := "allocations/" + r.AllocationID
			if r.AppInstanceID != "" {
				subject = "app-instances/" + r.AppInstanceID
			}
			if err := tx.Emit(storage.Event{Type: EventUsageRecorded, Subject: subject, OrgID: r.OrgID, ProjectID: r.ProjectID},
				map[string]any{"records": []usageRecordedData{usageData(r)}}); err != nil {
				return err
			}
		}
		for _, p := range progress {
			if err := tx.PutMeteredInterval(ctx, p); err != nil {
				return err
			}
		}
		return tx.Audit(storage.AuditEvent{Action: "billing.usage.meter", ResourceType: "usage_records"}, nil,
			map[string]int{"records_written": written, "intervals": len(progress)})
	})
	if err != nil {
		return 0, err
	}
	if written > 0 {
		s.usageRecorded()
	}
	return written, nil
}

// pending returns the slices of an interval not yet recorded, and the
// progress row to write once they are; nil when nothing moved.
func (s *Service) pending(kind, id string, start, end time.Time, done MeteredInterval, now time.Time) ([]Slice, []MeteredInterval) {
	if !done.ClosedAt.IsZero() {
		return nil, nil
	}
	from := start
	if done.MeteredUntil.After(from) {
		from = done.MeteredUntil
	}
	sl := Slices(from, end, now, s.Config.SliceLength)
	closed := !end.IsZero()
	if len(sl) == 0 && !closed {
		return nil, nil
	}
	p := MeteredInterval{Kind: kind, IntervalID: id, MeteredUntil: from}
	if len(sl) > 0 {
		p.MeteredUntil = sl[len(sl)-1].End
	}
	if closed {
		p.ClosedAt = now
	}
	return sl, []MeteredInterval{p}
}

func (s *Service) allocationRecords(iv AllocationInterval, done MeteredInterval, now time.Time, cid string) ([]UsageRecord, []MeteredInterval) {
	sl, p := s.pending("allocation", iv.ID, iv.Start, iv.End, done, now)
	out := make([]UsageRecord, 0, len(sl))
	for _, x := range sl {
		secs := int64(x.End.Sub(x.Start) / time.Second)
		out = append(out, UsageRecord{ID: iam.NewID(), DedupeKey: s.sliceKey("alloc", iv.ID, x.Start),
			OrgID: iv.OrgID, ProjectID: iv.ProjectID, AllocationID: iv.AllocationID, CorrelationID: cid,
			UsageSource: UsageSourceAllocation, UsageUnit: UnitGPUSeconds, Quantity: secs * iv.GPUCount, SKU: iv.SKU,
			StartTime: x.Start, EndTime: x.End, RecordedAt: now})
	}
	return out, p
}

func (s *Service) sessionRecords(inst Instance, iv InstanceInterval, done MeteredInterval, now time.Time, cid string) ([]UsageRecord, []MeteredInterval) {
	sl, p := s.pending("instance", iv.ID, iv.Start, iv.End, done, now)
	out := make([]UsageRecord, 0, len(sl))
	for _, x := range sl {
		out = append(out, UsageRecord{ID: iam.NewID(), DedupeKey: s.sliceKey("session", iv.ID, x.Start),
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, AppInstanceID: inst.ID, AppSlug: inst.AppSlug,
			OperatingMode: inst.OperatingMode, ControlPlaneScope: inst.ControlPlaneScope, RuntimeBackend: inst.RuntimeBackend,
			CorrelationID: cid, UsageSource: UsageSourceAppRuntime, UsageUnit: KindSessionSeconds,
			Quantity: int64(x.End.Sub(x.Start) / time.Second), Meter: MeterOf(inst.AppSlug, KindSessionSeconds),
			StartTime: x.Start, EndTime: x.End, RecordedAt: now})
	}
	return out, p
}
