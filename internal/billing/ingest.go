package billing

import (
	"context"
	"errors"
	"slices"

	"github.com/gpuaas/gpuaas/internal/cloudevents"
	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Metering kinds of the manifest schema ($defs/metering).
const (
	KindNone           = "none"
	KindSessionSeconds = "session_seconds"
	KindGPUSeconds     = "gpu_seconds"
	KindTokens         = "tokens"
	KindRequests       = "requests"
)

// UnitGPUSeconds is the unit of allocation usage.
const UnitGPUSeconds = "gpu_seconds"

// EventResult says what became of one accepted event.
type EventResult struct {
	ID            string `json:"id"`
	Source        string `json:"source"`
	Status        string `json:"status"` // recorded | duplicate
	UsageRecordID string `json:"usage_record_id,omitempty"`
}

// IngestResult answers a usage post. Every event in it is durable: the
// answer is only sent after the transaction that stored them committed.
type IngestResult struct {
	Recorded   int           `json:"recorded"`
	Duplicates int           `json:"duplicates"`
	Results    []EventResult `json:"results"`
}

// DedupeKeyForEvent is the durable dedupe key of an app usage event
// (cloudevents.Key in the "app" namespace): (source, id) within the
// project. It is the key an event is stored under unless another instance
// of the project holds it already (InstanceDedupeKey).
func DedupeKeyForEvent(projectID, source, id string) string {
	return cloudevents.Key("app", projectID, source, id)
}

// InstanceDedupeKey is the key an app usage event is stored under when its
// project-wide key (DedupeKeyForEvent) is held by another instance's
// record: (source, id) within the reporting instance (cloudevents.Rekey).
func InstanceDedupeKey(instanceID, source, id string) string {
	return cloudevents.Key(instanceKeyNamespace, instanceID, source, id)
}

const instanceKeyNamespace = "app-instance"

// RecordAppUsage stores usage events an app instance reports about itself.
// Only the instance's own service account may report, only in the unit its
// manifest declares, within the accepted time window; a (source, id) seen
// before is a duplicate, answered as success and not stored again.
func (s *Service) RecordAppUsage(ctx context.Context, g *iam.Grants, projectID, instanceID string, events []UsageEvent) (IngestResult, error) {
	project, err := s.IAM.Project(ctx, g, projectID, "")
	if err != nil {
		return IngestResult{}, err
	}
	dir := s.src().Instances
	if dir == nil {
		return IngestResult{}, &errdefs.Error{Kind: errdefs.KindUnavailable, Code: "instances_unavailable",
			Message: "app instances are not available on this server, so no instance can report usage"}
	}
	inst, err := dir.BillingInstance(ctx, s.Store.Read(), instanceID)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && inst.ProjectID != project.ID) {
		return IngestResult{}, errdefs.NotFound("app_instance_not_found",
			"app instance %q does not exist in project %s or you have no access to it", instanceID, project.ID)
	}
	if err != nil {
		return IngestResult{}, err
	}
	if p := principal.From(ctx); p.Type != principal.ServiceAccount || p.ID != inst.ServiceAccountID {
		return IngestResult{}, s.IAM.Deny(ctx, iam.PermBillingUsageReport, iam.Scope{OrgID: project.OrgID, ProjectID: project.ID},
			"app_instance", inst.ID)
	}
	// A shared instance's event may name the attached project it served:
	// the usage is that project's (and its org's).
	attributed := make([]attribution, len(events))
	orgOf := map[string]string{} // attached project → its org, looked up once per batch
	for i, ev := range events {
		attributed[i] = attribution{org: inst.OrgID, project: inst.ProjectID}
		if ev.ProjectID == "" || ev.ProjectID == inst.ProjectID || !inst.Shared() {
			continue
		}
		org, ok := orgOf[ev.ProjectID]
		var err error
		if !ok {
			org, err = s.Store.Read().AttachedProjectOrg(ctx, inst.ID, ev.ProjectID)
		}
		if errors.Is(err, storage.ErrNotFound) {
			return IngestResult{}, errdefs.Unprocessable("usage_project_not_attached",
				"event %q names project %s, which is not attached to shared app instance %s; attribute usage to the instance's project %s or to a project attached to it",
				ev.ID, ev.ProjectID, inst.ID, inst.ProjectID)
		}
		if err != nil {
			return IngestResult{}, err
		}
		orgOf[ev.ProjectID] = org
		attributed[i] = attribution{org: org, project: ev.ProjectID}
		events[i].ProjectID = "" // checked here: the attribution is settled
	}
	if err := s.checkEvents(inst, events); err != nil {
		return IngestResult{}, err
	}
	// Only once the caller is the instance itself and the batch is valid:
	// another identity cannot spend an instance's budget, and a refused
	// batch spends none.
	if err := s.takeUsage(inst.ID, len(events)); err != nil {
		return IngestResult{}, err
	}
	return s.storeEvents(ctx, inst, events, attributed)
}

// attribution is the org and project a usage event is billed to.
type attribution struct{ org, project string }

// checkEvents applies the rules that need the instance: attribution, the
// declared unit, and the time window.
func (s *Service) checkEvents(inst Instance, events []UsageEvent) error {
	if len(events) > s.Config.MaxBatchEvents {
		return errdefs.Invalid("batch_too_large", "a batch may hold at most %d events; this one holds %d — split it",
			s.Config.MaxBatchEvents, len(events))
	}
	switch inst.MeteringKind {
	case "", KindNone:
		return errdefs.Unprocessable("metering_not_declared",
			"app %s version %s declares no metering in its manifest, so its instances cannot report usage; declare metering.kind in the manifest",
			inst.AppSlug, inst.Version)
	case KindSessionSeconds:
		return errdefs.Unprocessable("usage_unit_platform_measured",
			"app %s meters session_seconds, which the platform measures itself from the instance's running intervals; the app does not report it",
			inst.AppSlug)
	}
	now := s.Now().UTC()
	var fe []errdefs.FieldError
	for i, ev := range events {
		at := "/" + itoa(i)
		if len(events) == 1 {
			at = ""
		}
		if err := cloudevents.CheckOwn("usage", ev.ID, ev.ProjectID, ev.Subject, inst.ID, inst.ProjectID); err != nil {
			return err
		}
		switch {
		case ev.UsageUnit != inst.MeteringKind:
			return errdefs.Unprocessable("usage_unit_not_declared",
				"event %q reports unit %q, but app %s version %s declares metering.kind %q; report usage in %q only",
				ev.ID, ev.UsageUnit, inst.AppSlug, inst.Version, inst.MeteringKind, inst.MeteringKind).
				WithDetails(map[string]any{"event_id": ev.ID, "usage_unit": ev.UsageUnit, "declared": []string{inst.MeteringKind}})
		case ev.Time.Before(now.Add(-s.Config.MaxEventAge)):
			fe = append(fe, errdefs.FieldError{Field: at + "/time", Code: "too_old",
				Message: "is older than the " + s.Config.MaxEventAge.String() + " a late event may be; it cannot be billed any more"})
		case ev.Time.After(now.Add(s.Config.MaxClockSkew)):
			fe = append(fe, errdefs.FieldError{Field: at + "/time", Code: "in_future",
				Message: "is in the future; usage is reported after it happened (check the workload's clock)"})
		case ev.StartTime.Before(now.Add(-s.Config.MaxEventAge)):
			// The interval's start is held to the same window as its end:
			// usage cannot be backdated to before any price existed.
			fe = append(fe, errdefs.FieldError{Field: at + "/data/start_time", Code: "too_old",
				Message: "is older than the " + s.Config.MaxEventAge.String() + " a late event may be; report long usage as several events, each within the window"})
		}
	}
	if fe != nil {
		e := errdefs.Validation(fe)
		e.Code = "usage_event_out_of_window"
		return e
	}
	return nil
}

func (s *Service) storeEvents(ctx context.Context, inst Instance, events []UsageEvent, attributed []attribution) (IngestResult, error) {
	now := s.Now().UTC()
	cid := correlation.ID(ctx)
	recs := make([]UsageRecord, len(events))
	for i, ev := range events {
		c := ev.CorrelationID
		if c == "" {
			c = cid
		}
		recs[i] = UsageRecord{ID: iam.NewID(), DedupeKey: DedupeKeyForEvent(inst.ProjectID, ev.Source, ev.ID),
			OrgID: attributed[i].org, ProjectID: attributed[i].project, AppInstanceID: inst.ID, AppSlug: inst.AppSlug,
			OperatingMode: inst.OperatingMode, ControlPlaneScope: inst.ControlPlaneScope, RuntimeBackend: inst.RuntimeBackend,
			CorrelationID: c, UsageSource: UsageSourceAppRuntime, UsageUnit: ev.UsageUnit, Quantity: ev.Quantity,
			Meter: MeterOf(inst.AppSlug, ev.UsageUnit), StartTime: ev.StartTime, EndTime: ev.Time,
			EventSource: ev.Source, EventID: ev.ID, RecordedAt: now}
	}
	var res IngestResult
	err := s.mutateRetryingDeadlocks(ctx, func(tx Tx) error {
		stored, err := tx.InsertUsageRecords(ctx, recs)
		if err != nil {
			return err
		}
		if err := storeUnderInstanceKeys(ctx, tx, inst.ID, recs, stored); err != nil {
			return err
		}
		res = IngestResult{Results: make([]EventResult, len(recs))}
		// New records by the project they are billed to (in order of first
		// appearance): a shared instance's usage for an attached project is
		// that project's, so its event is in that project's (and org's)
		// scope, never in the home project's, whose readers may not read
		// another project's usage.
		var billedTo []attribution
		fresh := map[attribution][]reportedRecord{}
		for i, r := range recs {
			out := EventResult{ID: r.EventID, Source: r.EventSource, Status: "duplicate"}
			if stored[r.ID] {
				out.Status, out.UsageRecordID = "recorded", r.ID
				res.Recorded++
				a := attribution{org: r.OrgID, project: r.ProjectID}
				if _, ok := fresh[a]; !ok {
					billedTo = append(billedTo, a)
				}
				fresh[a] = append(fresh[a], reportedRecord{UsageRecordID: r.ID, EventSource: r.EventSource, EventID: r.EventID,
					Quantity: r.Quantity, StartTime: rfc(r.StartTime), EndTime: rfc(r.EndTime)})
			} else {
				res.Duplicates++
			}
			res.Results[i] = out
		}
		// One event per maxRecordsPerEvent new records: however large the
		// post, each event stays far below the bus's message limit.
		for _, a := range billedTo {
			for chunk := range slices.Chunk(fresh[a], maxRecordsPerEvent) {
				if err := tx.Emit(storage.Event{Type: EventUsageRecorded, Subject: "app-instances/" + inst.ID,
					OrgID: a.org, ProjectID: a.project}, reportedBatch{UsageSource: UsageSourceAppRuntime,
					UsageUnit: recs[0].UsageUnit, Meter: recs[0].Meter, AppInstanceID: inst.ID, AppSlug: inst.AppSlug,
					OperatingMode: inst.OperatingMode, ControlPlaneScope: inst.ControlPlaneScope, RuntimeBackend: inst.RuntimeBackend,
					Records: chunk}); err != nil {
					return err
				}
			}
		}
		return tx.Audit(storage.AuditEvent{Action: "billing.usage.report", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID}, nil, map[string]int{"recorded": res.Recorded, "duplicates": res.Duplicates})
	})
	if err != nil {
		return IngestResult{}, err
	}
	if res.Recorded > 0 {
		s.usageRecorded()
	}
	return res, nil
}

// storeUnderInstanceKeys stores again, under InstanceDedupeKey, the
// records of recs that another instance's record kept out
// (cloudevents.Rekey), and marks those it stores in stored.
func storeUnderInstanceKeys(ctx context.Context, tx Tx, instanceID string, recs []UsageRecord, stored map[string]bool) error {
	keyed := make([]cloudevents.Keyed, len(recs))
	for i, r := range recs {
		keyed[i] = cloudevents.Keyed{RowID: r.ID, Key: r.DedupeKey, Source: r.EventSource, EventID: r.EventID}
	}
	rekeyed, err := cloudevents.Rekey(ctx, instanceKeyNamespace, instanceID, keyed, stored, tx.UsageKeyOwners)
	if err != nil || len(rekeyed) == 0 {
		return err
	}
	var again []UsageRecord
	for i, r := range recs {
		if k, ok := rekeyed[r.ID]; ok {
			recs[i].DedupeKey = k
			again = append(again, recs[i])
		}
	}
	more, err := tx.InsertUsageRecords(ctx, again)
	for id := range more {
		stored[id] = true
	}
	return err
}

// maxDeadlockRetries bounds how often a usage write that PostgreSQL aborted
// to break a lock cycle is tried again (as placements do).
const maxDeadlockRetries = 16

// mutateRetryingDeadlocks runs fn in one transaction, again when
// PostgreSQL aborted it as a deadlock victim (it then holds nothing, so
// trying again is safe). Usage inserts take their keys in dedupe-key order,
// which leaves few cycles to break; this covers the rest.
func (s *Service) mutateRetryingDeadlocks(ctx context.Context, fn func(tx Tx) error) error {
	for i := 0; ; i++ {
		err := s.Store.Mutate(ctx, fn)
		if !errors.Is(err, storage.ErrDeadlock) {
			return err
		}
		if i == maxDeadlockRetries {
			return errdefs.Conflict("usage_write_contended",
				"recording usage kept deadlocking with concurrent batches; retry the request (duplicates are not stored twice)")
		}
	}
}

// MeterOf names an app's meter: the app and its unit, e.g. "vllm/tokens".
func MeterOf(appSlug, unit string) string { return appSlug + "/" + unit }

// DefaultMeter is the meter whose price applies to every app that has no
// price of its own for unit.
func DefaultMeter(unit string) string { return "*/" + unit }

// AppEmittedKinds are the metering kinds an app reports itself.
var AppEmittedKinds = []string{KindGPUSeconds, KindTokens, KindRequests}

func appEmitted(kind string) bool { return slices.Contains(AppEmittedKinds, kind) }
