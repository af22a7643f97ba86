package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// The instances domain's storage (instances.Store) on both dialects:
// instances and their status-guarded updates, the live-instance counts,
// lifecycle operations with their phase guard and lease, the timeline,
// members, and the one-time UI open codes.
func TestInstancesConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		for _, c := range []conformanceCase{
			{"instance_round_trip", testInstanceRoundTrip},
			{"instance_statuses", testInstanceStatuses},
			{"instance_update", testInstanceUpdate},
			{"instance_lists", testInstanceLists},
			{"live_instances_on", testLiveInstancesOn},
			{"live_counts", testLiveInstanceCounts},
			{"operations", testInstanceOperations},
			{"operation_phase_guard", testInstanceOperationPhaseGuard},
			{"operation_lease", testInstanceOperationLease},
			{"events", testInstanceEvents},
			{"members", testInstanceMembers},
			{"added_members", testAddedMembers},
			{"running_member_reports", testRunningMemberReports},
			{"worker_operations", testWorkerOperations},
			{"health", testInstanceHealth},
			{"host_ports", testHostPortsHeld},
			{"reported_events", testReportedInstanceEvents},
			{"ui_open_codes", testUIOpenCodes},
		} {
			t.Run(c.name, func(t *testing.T) { c.run(t, db) })
		}
	})
}

func newInstance(o iam.Org, p iam.Project, slug, version string, status instances.InstanceStatus) instances.AppInstance {
	return instances.AppInstance{ID: newID(), OrgID: o.ID, ProjectID: p.ID, AppSlug: slug, DisplayName: slug, Version: version, Status: status,
		OperatingMode: "managed", ControlPlaneScope: "project", RuntimeBackend: "docker", TenantBoundaryMode: "shared",
		Effective: []byte(`{}`), History: []byte(`[]`), CreatedBy: "user:1", CreatedAt: t0, UpdatedAt: t0,
		Health: instances.Health{State: instances.HealthUnknown}} // a new row's health is the column's default
}

func mkInstance(t *testing.T, s instances.Store, i instances.AppInstance) instances.AppInstance {
	t.Helper()
	noErr(t, "insert instance", s.Read().InsertAppInstance(context.Background(), i))
	return i
}

// sameInstance compares instances, their JSON fields by meaning.
func sameInstance(t *testing.T, what string, got, want instances.AppInstance) {
	t.Helper()
	sameJSON(t, what+" effective", got.Effective, want.Effective)
	sameJSON(t, what+" access", got.Access, want.Access)
	sameJSON(t, what+" log tail", got.LogTail, want.LogTail)
	sameJSON(t, what+" history", got.History, want.History)
	got.Effective, want.Effective, got.Access, want.Access = nil, nil, nil, nil
	got.LogTail, want.LogTail, got.History, want.History = nil, nil, nil, nil
	same(t, what, got, want)
}

func instanceIDs(list []instances.AppInstance) []string {
	var ids []string
	for _, i := range list {
		ids = append(ids, i.ID)
	}
	return ids
}

func testInstanceRoundTrip(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Instances(db).Read()
	o, p := tenant(t, db, "inst")
	other := mkProject(t, db, o, "inst-other")
	i := instances.AppInstance{ID: newID(), OrgID: o.ID, ProjectID: p.ID, AppSlug: "jupyter", DisplayName: "My notebook", Version: "1.2.3",
		Digest: "sha256:" + newID(), Status: instances.StatusRunning, ReasonCode: instances.ReasonUpgradeReverted, ReasonMessage: "readiness probe failed",
		OperatingMode: "managed", ControlPlaneScope: "project", RuntimeBackend: "docker_compose", TenantBoundaryMode: "dedicated_node",
		Effective:          []byte(`{"resources": {"gpus": 2, "memory_mib": 65536}, "config": {"b": "2", "a": "1"}, "parameters": []}`),
		TargetAllocationID: newID(), NodeID: newID(), ServiceAccountID: newID(), HostPort: 31337, DeploySeq: 4,
		Access:             []byte(`{"url": "https://x.example/", "ports": [8888, 6006]}`),
		LogTail:            []byte(`["line one", "line \"two\""]`),
		History:            []byte(`[{"version": "1.2.2", "digest": "sha256:old"}]`),
		CurrentOperationID: newID(), CreatedBy: "user:42", CreatedAt: at(-time.Hour), UpdatedAt: at(time.Second), DecommissionedAt: at(time.Minute),
		Health: instances.Health{State: instances.HealthUnknown}}
	noErr(t, "insert", q.InsertAppInstance(ctx, i))
	got, err := q.GetAppInstance(ctx, p.ID, i.ID)
	noErr(t, "get", err)
	sameInstance(t, "instance round trip", got, i)
	got, err = q.GetAppInstanceByID(ctx, i.ID)
	noErr(t, "get by id", err)
	sameInstance(t, "instance round trip by id", got, i)

	// Nullable documents and times stay empty; no history reads as [].
	bare := newInstance(o, p, "bare", "1", instances.StatusRequested)
	bare.History = nil
	noErr(t, "insert bare", q.InsertAppInstance(ctx, bare))
	got, err = q.GetAppInstanceByID(ctx, bare.ID)
	noErr(t, "get bare", err)
	if got.Access != nil || got.LogTail != nil || !got.DecommissionedAt.IsZero() {
		t.Fatalf("bare instance: access %q log tail %q decommissioned %v; want none", got.Access, got.LogTail, got.DecommissionedAt)
	}
	bare.History = []byte(`[]`)
	sameInstance(t, "bare instance", got, bare)

	_, err = q.GetAppInstance(ctx, other.ID, i.ID)
	wantErr(t, "instance of another project", err, storage.ErrNotFound)
	_, err = q.GetAppInstance(ctx, p.ID, newID())
	wantErr(t, "missing instance", err, storage.ErrNotFound)
	_, err = q.GetAppInstanceByID(ctx, newID())
	wantErr(t, "missing instance by id", err, storage.ErrNotFound)

	dup := i
	dup.DisplayName = "again"
	wantErr(t, "duplicate id", q.InsertAppInstance(ctx, dup), storage.ErrAlreadyExists)
	bad := i
	bad.ID, bad.ProjectID = newID(), newID()
	wantErr(t, "instance of a missing project", q.InsertAppInstance(ctx, bad), storage.ErrConflict)
	bad = i
	bad.ID, bad.OrgID = newID(), newID()
	wantErr(t, "instance of a missing org", q.InsertAppInstance(ctx, bad), storage.ErrConflict)
	bad = i
	bad.ID, bad.Status = newID(), "exploded"
	wantErr(t, "unknown status", q.InsertAppInstance(ctx, bad), storage.ErrConflict)
}

func testInstanceStatuses(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := store.Instances(db).Read()
	o, p := tenant(t, db, "statuses")
	for _, st := range instances.Statuses {
		i := mkInstance(t, store.Instances(db), newInstance(o, p, "st", "1", st))
		got, err := q.GetAppInstance(ctx, p.ID, i.ID)
		noErr(t, "get "+string(st), err)
		if got.Status != st {
			t.Fatalf("status %q read back as %q", st, got.Status)
		}
	}
}

func testInstanceUpdate(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "upd")
	i := newInstance(o, p, "upd", "1.0", instances.StatusRequested)
	i.Effective, i.TargetAllocationID = []byte(`{"resources": {"gpus": 1}}`), newID()
	mkInstance(t, s, i)
	update := func(next instances.AppInstance, prev instances.InstanceStatus) error {
		return s.Mutate(ctx, func(tx instances.Tx) error {
			if err := tx.UpdateAppInstance(ctx, next, prev); err != nil {
				return err
			}
			return audited(tx)
		})
	}

	// Every mutable column moves; what the launch decided stays.
	next := i
	next.Version, next.Digest, next.Status = "1.1", "sha256:new", instances.StatusDeploying
	next.ReasonCode, next.ReasonMessage = "r", "m"
	next.NodeID, next.ServiceAccountID, next.HostPort, next.DeploySeq = newID(), newID(), 40000, 1
	next.Access, next.LogTail, next.History = []byte(`{"url": "u"}`), []byte(`["l"]`), []byte(`[{"version": "1.0"}]`)
	next.CurrentOperationID, next.UpdatedAt, next.DecommissionedAt = newID(), at(time.Minute), at(2*time.Minute)
	changed := next
	changed.DisplayName, changed.AppSlug, changed.Effective, changed.TargetAllocationID = "renamed", "other", []byte(`{"x": 1}`), newID()
	changed.OperatingMode, changed.RuntimeBackend, changed.CreatedBy, changed.CreatedAt = "x", "x", "x", at(time.Hour)
	noErr(t, "update from requested", update(changed, instances.StatusRequested))
	got, err := q.GetAppInstanceByID(ctx, i.ID)
	noErr(t, "get", err)
	sameInstance(t, "updated instance (immutable columns kept)", got, next)

	// A stale previous status: a concurrent transition won, nothing moves.
	stale := next
	stale.Status, stale.UpdatedAt = instances.StatusFailed, at(time.Hour)
	wantErr(t, "update from a stale status", update(stale, instances.StatusRequested), storage.ErrNotFound)
	got, _ = q.GetAppInstanceByID(ctx, i.ID)
	sameInstance(t, "after a stale update", got, next)
	missing := next
	missing.ID = newID()
	wantErr(t, "update a missing instance", update(missing, instances.StatusDeploying), storage.ErrNotFound)
	bad := next
	bad.Status = "exploded"
	wantErr(t, "update into an unknown status", update(bad, instances.StatusDeploying), storage.ErrConflict)

	// Clearing: documents and the decommission time go back to empty.
	cleared := next
	cleared.Status, cleared.Access, cleared.LogTail, cleared.History, cleared.DecommissionedAt = instances.StatusRunning, nil, nil, nil, time.Time{}
	noErr(t, "update from deploying", update(cleared, instances.StatusDeploying))
	got, _ = q.GetAppInstanceByID(ctx, i.ID)
	cleared.History = []byte(`[]`)
	sameInstance(t, "cleared instance", got, cleared)
}

func testInstanceLists(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "list")
	other := mkProject(t, db, o, "list-other")
	mkInstance(t, s, newInstance(o, other, "elsewhere", "1", instances.StatusRunning))
	var all, running []string
	noErr(t, "bulk instances", s.InTx(ctx, func(q instances.Queries) error {
		for n := 0; n <= storage.MaxPageLimit; n++ {
			st := instances.StatusRunning
			if n%3 != 0 {
				st = instances.StatusFailed
			}
			i := newInstance(o, p, fmt.Sprintf("app-%d", n), "1", st)
			if err := q.InsertAppInstance(ctx, i); err != nil {
				return err
			}
			all = append(all, i.ID)
			if st == instances.StatusRunning {
				running = append(running, i.ID)
			}
		}
		return nil
	}))
	list := func(st instances.InstanceStatus) func(p storage.Page) ([]instances.AppInstance, string, error) {
		return func(pg storage.Page) ([]instances.AppInstance, string, error) {
			return q.ListAppInstances(ctx, p.ID, st, pg)
		}
	}
	same(t, "the project's instances in creation order", instanceIDs(pageAll(t, 70, list(""))), all)
	same(t, "its running instances", instanceIDs(pageAll(t, 30, list(instances.StatusRunning))), running)
	got, next, err := q.ListAppInstances(ctx, p.ID, instances.StatusDecommissioned, storage.Page{})
	if err != nil || len(got) != 0 || next != "" {
		t.Fatalf("decommissioned instances: %d, next %q, err %v; want none", len(got), next, err)
	}
	checkClamp(t, len(all), list(""))
}

func testLiveInstancesOn(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "on")
	alloc, node := newID(), newID()
	var onAlloc, onNode []string
	for _, st := range instances.Statuses {
		i := newInstance(o, p, "on", "1", st)
		i.TargetAllocationID, i.NodeID = alloc, node
		mkInstance(t, s, i)
		if st != instances.StatusDecommissioned {
			onAlloc = append(onAlloc, i.ID)
			onNode = append(onNode, i.ID)
		}
	}
	elsewhere := newInstance(o, p, "on", "1", instances.StatusRunning)
	elsewhere.TargetAllocationID, elsewhere.NodeID = newID(), node
	mkInstance(t, s, elsewhere)
	onNode = append(onNode, elsewhere.ID)

	got, err := q.LiveInstancesOn(ctx, alloc, "")
	noErr(t, "on the allocation", err)
	same(t, "live instances on the allocation", instanceIDs(got), onAlloc)
	got, err = q.LiveInstancesOn(ctx, "", node)
	noErr(t, "on the node", err)
	same(t, "live instances on the node", instanceIDs(got), onNode)
	got, err = q.LiveInstancesOn(ctx, newID(), "")
	if err != nil || len(got) != 0 {
		t.Fatalf("on an empty allocation: %d, %v", len(got), err)
	}
}

func testLiveInstanceCounts(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "counts")
	slug := "count-" + newID()
	digest, memberDigest, removedDigest := "sha256:pin-"+newID(), "sha256:member-"+newID(), "sha256:removed-"+newID()
	count := func(version string) int {
		n, err := q.CountLiveInstancesOfVersion(ctx, slug, version)
		noErr(t, "count of version", err)
		return n
	}
	using := func(d string) int {
		n, err := q.CountLiveInstancesUsingDigest(ctx, slug, d)
		noErr(t, "count using digest", err)
		if other, err := q.CountLiveInstancesUsingDigest(ctx, slug+"-other", d); err != nil || other != 0 {
			t.Fatalf("instances of another app counted as running %s: %d %v", d, other, err)
		}
		return n
	}
	member := func(i instances.AppInstance, d string, st instances.MemberStatus) {
		m := instances.InstanceMember{ID: newID(), InstanceID: i.ID, AllocationID: newID(), NodeID: newID(), Role: instances.RolePrimary, Status: st,
			Version: i.Version, Digest: d, WorkloadName: "w-" + i.ID, CreatedAt: t0, UpdatedAt: t0}
		noErr(t, "insert member", q.InsertInstanceMember(ctx, m))
	}
	if count("1") != 0 || using(digest) != 0 {
		t.Fatal("counts before any instance must be zero")
	}
	// Every status but decommissioned holds (or may hold) a workload.
	for _, st := range instances.Statuses {
		i := newInstance(o, p, slug, "1", st)
		i.Digest = digest
		mkInstance(t, s, i)
		member(i, memberDigest, instances.MemberRunning)
	}
	live := len(instances.Statuses) - 1
	if n := count("1"); n != live {
		t.Fatalf("live instances of the version = %d, want %d (all but decommissioned)", n, live)
	}
	if n := count("2"); n != 0 {
		t.Fatalf("live instances of another version = %d", n)
	}
	if n, err := q.CountLiveInstancesOfVersion(ctx, "other-"+slug, "1"); err != nil || n != 0 {
		t.Fatalf("live instances of another app = %d, %v", n, err)
	}
	if n := using(digest); n != live {
		t.Fatalf("live instances pinned to the digest = %d, want %d", n, live)
	}
	// A member's digest counts once per instance, and not once removed.
	if n := using(memberDigest); n != live {
		t.Fatalf("live instances whose members run the digest = %d, want %d", n, live)
	}
	i := mkInstance(t, s, newInstance(o, p, slug, "2", instances.StatusUpgrading))
	member(i, memberDigest, instances.MemberDeploying)
	member(i, memberDigest, instances.MemberFailed)
	member(i, removedDigest, instances.MemberRemoved)
	if n := using(memberDigest); n != live+1 {
		t.Fatalf("after an upgrading instance with two members of the digest: %d, want %d", n, live+1)
	}
	if n := using(removedDigest); n != 0 {
		t.Fatalf("a removed member's digest counts %d, want 0", n)
	}
	if n := count("2"); n != 1 {
		t.Fatalf("live instances of version 2 = %d, want 1", n)
	}
}

func newOperation(i instances.AppInstance, kind instances.OperationKind, created time.Time) instances.InstanceOperation {
	return instances.InstanceOperation{ID: newID(), InstanceID: i.ID, OrgID: i.OrgID, ProjectID: i.ProjectID, Kind: kind, State: instances.OpInProgress,
		Phase: "start", CreatedAt: created, UpdatedAt: created, Executor: instances.ExecutorPlatform}
}

func testInstanceOperations(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "ops")
	other := mkProject(t, db, o, "ops-other")
	i := mkInstance(t, s, newInstance(o, p, "ops", "1", instances.StatusUpgrading))
	op := instances.InstanceOperation{ID: newID(), InstanceID: i.ID, OrgID: o.ID, ProjectID: p.ID, Kind: instances.OpUpgrade, State: instances.OpFailed,
		Phase: "revert_run", FromVersion: "1", TargetVersion: "2", Description: "upgrade reverted", ReasonCode: instances.ReasonUpgradeReverted,
		TaskID: newID(), CorrelationID: "corr-" + newID(), Actor: "user:7", LeaseOwner: "replica-a", LeaseExpiresAt: at(time.Minute),
		CreatedAt: t0, UpdatedAt: at(time.Second), CompletedAt: at(2 * time.Second), Executor: instances.ExecutorPlatform}
	noErr(t, "insert", q.InsertInstanceOperation(ctx, op))
	got, err := q.GetInstanceOperation(ctx, p.ID, op.ID)
	noErr(t, "get", err)
	same(t, "operation round trip", got, op)
	for _, k := range []instances.OperationKind{instances.OpCreate, instances.OpUpgrade, instances.OpRollback, instances.OpDecommission,
		instances.OpMemberAdd, instances.OpMemberRemove, instances.OpMemberRecover} {
		ko := newOperation(i, k, t0)
		if k == instances.OpMemberAdd {
			ko.MemberIDs = []string{newID(), newID()} // kept in order
		}
		noErr(t, "insert "+string(k), q.InsertInstanceOperation(ctx, ko))
		got, err := q.GetInstanceOperation(ctx, p.ID, ko.ID)
		noErr(t, "get "+string(k), err)
		same(t, "operation of kind "+string(k), got, ko)
	}

	_, err = q.GetInstanceOperation(ctx, other.ID, op.ID)
	wantErr(t, "operation of another project", err, storage.ErrNotFound)
	_, err = q.GetInstanceOperation(ctx, p.ID, newID())
	wantErr(t, "missing operation", err, storage.ErrNotFound)
	wantErr(t, "duplicate operation", q.InsertInstanceOperation(ctx, op), storage.ErrAlreadyExists)
	bad := op
	bad.ID, bad.InstanceID = newID(), newID()
	wantErr(t, "operation of a missing instance", q.InsertInstanceOperation(ctx, bad), storage.ErrConflict)
	bad = op
	bad.ID, bad.Kind = newID(), "explode"
	wantErr(t, "unknown kind", q.InsertInstanceOperation(ctx, bad), storage.ErrConflict)
	bad = op
	bad.ID, bad.State = newID(), "paused"
	wantErr(t, "unknown state", q.InsertInstanceOperation(ctx, bad), storage.ErrConflict)
}

func testInstanceOperationPhaseGuard(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "phase")
	i := mkInstance(t, s, newInstance(o, p, "phase", "1", instances.StatusDeploying))
	op := newOperation(i, instances.OpCreate, t0)
	op.TargetVersion, op.CorrelationID, op.Actor = "1", "corr", "user:1"
	noErr(t, "insert", q.InsertInstanceOperation(ctx, op))
	step := func(next instances.InstanceOperation, prevPhase instances.OperationPhase) error {
		return s.Mutate(ctx, func(tx instances.Tx) error {
			if err := tx.UpdateInstanceOperation(ctx, next, prevPhase); err != nil {
				return err
			}
			return audited(tx)
		})
	}

	// One step: the progress columns move, the request's stay.
	next := op
	next.Phase, next.Description, next.TaskID, next.UpdatedAt = "run", "waiting for run", newID(), at(time.Minute)
	changed := next
	changed.Kind, changed.TargetVersion, changed.Actor, changed.CreatedAt, changed.LeaseOwner = instances.OpRollback, "9", "x", at(time.Hour), "x"
	noErr(t, "start → run", step(changed, "start"))
	got, _ := q.GetInstanceOperation(ctx, p.ID, op.ID)
	same(t, "after a step (request columns kept)", got, next)

	// A second driver that read the old phase cannot advance it again.
	dup := next
	dup.Phase, dup.Description = "teardown", "the other driver"
	wantErr(t, "step from a stale phase", step(dup, "start"), storage.ErrNotFound)
	got, _ = q.GetInstanceOperation(ctx, p.ID, op.ID)
	same(t, "after a stale step", got, next)
	missing := next
	missing.ID = newID()
	wantErr(t, "step a missing operation", step(missing, "run"), storage.ErrNotFound)
	bad := next
	bad.State = "paused"
	wantErr(t, "step into an unknown state", step(bad, "run"), storage.ErrConflict)

	// Completion is a last step: a finished operation is never moved.
	done := next
	done.State, done.Phase, done.ReasonCode, done.UpdatedAt, done.CompletedAt = instances.OpSucceeded, "done", "", at(2*time.Minute), at(2*time.Minute)
	noErr(t, "run → done", step(done, "run"))
	got, _ = q.GetInstanceOperation(ctx, p.ID, op.ID)
	same(t, "completed operation", got, done)
	again := done
	again.State, again.CompletedAt = instances.OpFailed, at(time.Hour)
	wantErr(t, "step a completed operation at its phase", step(again, "done"), storage.ErrNotFound)
	got, _ = q.GetInstanceOperation(ctx, p.ID, op.ID)
	same(t, "completed operation kept", got, done)
}

func testInstanceOperationLease(t *testing.T, db *store.DB) {
	db = storetest.Open(t, db.Dialect()) // open operations of every instance
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "lease")
	i := mkInstance(t, s, newInstance(o, p, "lease", "1", instances.StatusDeploying))
	var ops []instances.InstanceOperation
	for n := 0; n < 4; n++ {
		op := newOperation(i, instances.OpCreate, at(time.Duration(n)*time.Second))
		noErr(t, "insert", q.InsertInstanceOperation(ctx, op))
		ops = append(ops, op)
	}
	done := newOperation(i, instances.OpDecommission, t0)
	done.State, done.CompletedAt = instances.OpSucceeded, t0
	noErr(t, "insert done", q.InsertInstanceOperation(ctx, done))
	a, b, c, d := ops[0], ops[1], ops[2], ops[3]
	open := func(now time.Time, limit int) []string {
		got, err := q.OpenInstanceOperations(ctx, now, limit)
		noErr(t, "open operations", err)
		var ids []string
		for _, o := range got {
			ids = append(ids, o.ID)
		}
		return ids
	}
	lease := func(id, owner string, now, until time.Time) bool {
		ok, err := q.LeaseInstanceOperation(ctx, id, owner, now, until)
		noErr(t, "lease", err)
		return ok
	}
	get := func(id string) instances.InstanceOperation {
		got, err := q.GetInstanceOperation(ctx, p.ID, id)
		noErr(t, "get", err)
		return got
	}
	same(t, "open operations, oldest first", open(t0, 10), []string{a.ID, b.ID, c.ID, d.ID})
	same(t, "limited", open(t0, 2), []string{a.ID, b.ID})

	until := at(time.Minute)
	if !lease(a.ID, "r1", t0, until) {
		t.Fatal("a free lease must be taken")
	}
	if got := get(a.ID); got.LeaseOwner != "r1" || !got.LeaseExpiresAt.Equal(until) {
		t.Fatalf("leased: owner %q until %v", got.LeaseOwner, got.LeaseExpiresAt)
	}
	if lease(a.ID, "r2", at(30*time.Second), at(2*time.Minute)) {
		t.Fatal("a live lease must refuse another owner")
	}
	if lease(a.ID, "r2", until, at(2*time.Minute)) {
		t.Fatal("a lease at its end must still refuse another owner")
	}
	if got := get(a.ID); got.LeaseOwner != "r1" || !got.LeaseExpiresAt.Equal(until) {
		t.Fatalf("after refusals: owner %q until %v", got.LeaseOwner, got.LeaseExpiresAt)
	}
	same(t, "a leased operation is not open", open(at(30*time.Second), 10), []string{b.ID, c.ID, d.ID})
	same(t, "nor at its lease's end", open(until, 10), []string{b.ID, c.ID, d.ID})
	// Its owner may renew it.
	if !lease(a.ID, "r1", at(30*time.Second), at(90*time.Second)) {
		t.Fatal("the owner must renew its own lease")
	}
	until = at(90 * time.Second)

	// Expired: open again, and another owner takes it.
	after := until.Add(time.Millisecond)
	same(t, "expired lease open again", open(after, 10), []string{a.ID, b.ID, c.ID, d.ID})
	if !lease(a.ID, "r2", after, at(3*time.Minute)) {
		t.Fatal("an expired lease must be taken")
	}
	if got := get(a.ID); got.LeaseOwner != "r2" || !got.LeaseExpiresAt.Equal(at(3*time.Minute)) {
		t.Fatalf("taken over: owner %q until %v; want r2", got.LeaseOwner, got.LeaseExpiresAt)
	}

	// Release: only the owner's release frees it.
	noErr(t, "release by the old owner", q.ReleaseInstanceOperation(ctx, a.ID, "r1"))
	if got := get(a.ID); got.LeaseOwner != "r2" {
		t.Fatalf("another owner's release freed the lease: owner %q", got.LeaseOwner)
	}
	noErr(t, "release", q.ReleaseInstanceOperation(ctx, a.ID, "r2"))
	if got := get(a.ID); got.LeaseOwner != "" || !got.LeaseExpiresAt.IsZero() {
		t.Fatalf("released: owner %q until %v", got.LeaseOwner, got.LeaseExpiresAt)
	}
	same(t, "released operation open", open(after, 10), []string{a.ID, b.ID, c.ID, d.ID})
	if !lease(a.ID, "r3", after, at(4*time.Minute)) {
		t.Fatal("a released lease must be taken")
	}

	// A finished or missing operation is never leased.
	if lease(done.ID, "r1", t0, until) {
		t.Fatal("a completed operation must not be leased")
	}
	if lease(newID(), "r1", t0, until) {
		t.Fatal("a missing operation must not be leased")
	}
}

func newEvent(i instances.AppInstance, typ string, when time.Time) instances.InstanceEvent {
	return instances.InstanceEvent{ID: newID(), InstanceID: i.ID, ProjectID: i.ProjectID, EventType: typ, Status: i.Status,
		Payload: []byte(`{}`), OccurredAt: when}
}

func testInstanceEvents(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "events")
	i := mkInstance(t, s, newInstance(o, p, "ev", "1", instances.StatusRunning))
	other := mkInstance(t, s, newInstance(o, p, "ev-other", "1", instances.StatusRunning))
	noErr(t, "other's event", q.InsertInstanceEvent(ctx, newEvent(other, instances.EventRunning, t0)))
	e := instances.InstanceEvent{ID: newID(), InstanceID: i.ID, ProjectID: p.ID, EventType: instances.EventUpgraded, Status: instances.StatusRunning,
		OperationID: newID(), CorrelationID: "corr-" + newID(), Payload: []byte(`{"from": "1", "to": "2", "digests": ["a", "b"]}`), OccurredAt: at(time.Second)}
	noErr(t, "insert", q.InsertInstanceEvent(ctx, e))
	wantErr(t, "duplicate event", q.InsertInstanceEvent(ctx, e), storage.ErrAlreadyExists)
	bad := e
	bad.ID, bad.InstanceID = newID(), newID()
	wantErr(t, "event of a missing instance", q.InsertInstanceEvent(ctx, bad), storage.ErrConflict)

	want := []string{e.ID}
	noErr(t, "bulk events", s.InTx(ctx, func(q instances.Queries) error {
		for n := 0; n < storage.MaxPageLimit; n++ {
			ev := newEvent(i, instances.EventTypes[n%len(instances.EventTypes)], at(time.Duration(n)*time.Millisecond))
			if err := q.InsertInstanceEvent(ctx, ev); err != nil {
				return err
			}
			want = append(want, ev.ID)
		}
		return nil
	}))
	list := func(pg storage.Page) ([]instances.InstanceEvent, string, error) {
		return q.ListInstanceEvents(ctx, i.ID, pg)
	}
	got := pageAll(t, 64, list)
	var ids []string
	for _, g := range got {
		ids = append(ids, g.ID)
	}
	same(t, "the instance's timeline, oldest first", ids, want)
	first := got[0]
	sameJSON(t, "payload", first.Payload, e.Payload)
	first.Payload, e.Payload = nil, nil
	same(t, "event round trip", first, e)
	checkClamp(t, len(want), list)
}

func testInstanceMembers(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "members")
	i := mkInstance(t, s, newInstance(o, p, "mem", "1", instances.StatusUpgrading))
	other := mkInstance(t, s, newInstance(o, p, "mem-other", "1", instances.StatusRunning))
	mk := func(inst instances.AppInstance, workload string, st instances.MemberStatus) instances.InstanceMember {
		m := instances.InstanceMember{ID: newID(), InstanceID: inst.ID, AllocationID: newID(), NodeID: newID(), Role: instances.RolePrimary, Status: st,
			Version: inst.Version, Digest: "sha256:" + workload, WorkloadName: workload, ContainerIDs: []byte(`["c-1"]`), CreatedAt: t0, UpdatedAt: t0}
		noErr(t, "insert member", q.InsertInstanceMember(ctx, m))
		return m
	}
	members := func(inst instances.AppInstance) []instances.InstanceMember {
		return pageAll(t, 2, func(pg storage.Page) ([]instances.InstanceMember, string, error) {
			return q.ListInstanceMembers(ctx, inst.ID, pg)
		})
	}
	m := instances.InstanceMember{ID: newID(), InstanceID: i.ID, AllocationID: newID(), NodeID: newID(), Role: "sidecar", Status: instances.MemberRunning,
		Version: "1", Digest: "sha256:abc", WorkloadName: "w-1", ContainerIDs: []byte(`["c-a", "c-b"]`), CreatedAt: at(time.Second), UpdatedAt: at(2 * time.Second)}
	noErr(t, "insert", q.InsertInstanceMember(ctx, m))
	got := members(i)
	if len(got) != 1 {
		t.Fatalf("members: %d, want 1", len(got))
	}
	sameJSON(t, "container ids", got[0].ContainerIDs, m.ContainerIDs)
	got[0].ContainerIDs = nil
	want := m
	want.ContainerIDs = nil
	same(t, "member round trip", got[0], want)
	wantErr(t, "duplicate member", q.InsertInstanceMember(ctx, m), storage.ErrAlreadyExists)
	bad := m
	bad.ID, bad.InstanceID = newID(), newID()
	wantErr(t, "member of a missing instance", q.InsertInstanceMember(ctx, bad), storage.ErrConflict)
	empty := m
	empty.ID, empty.ContainerIDs, empty.WorkloadName = newID(), nil, "w-empty"
	noErr(t, "member without containers", q.InsertInstanceMember(ctx, empty))

	// Status by workload; a removed member stays removed.
	w2a, w2b := mk(i, "w-2", instances.MemberDeploying), mk(i, "w-2", instances.MemberDeploying)
	old := mk(i, "w-2", instances.MemberRemoved)
	theirs := mk(other, "w-2", instances.MemberDeploying)
	ids := []byte(`["c-x", "c-y"]`)
	noErr(t, "w-2 running", q.SetInstanceMembersStatus(ctx, i.ID, "w-2", instances.MemberRunning, ids, at(time.Minute)))
	status := func(list []instances.InstanceMember) map[string]instances.InstanceMember {
		out := map[string]instances.InstanceMember{}
		for _, m := range list {
			out[m.ID] = m
		}
		return out
	}
	byID := status(members(i))
	for _, id := range []string{w2a.ID, w2b.ID} {
		if m := byID[id]; m.Status != instances.MemberRunning || !m.UpdatedAt.Equal(at(time.Minute)) {
			t.Fatalf("w-2 member %s: %q at %v; want running at %v", id, m.Status, m.UpdatedAt, at(time.Minute))
		} else {
			sameJSON(t, "w-2 container ids", m.ContainerIDs, ids)
		}
	}
	if m := byID[old.ID]; m.Status != instances.MemberRemoved || !m.UpdatedAt.Equal(t0) {
		t.Fatalf("a removed member moved: %q at %v", m.Status, m.UpdatedAt)
	}
	if w1 := byID[m.ID]; w1.Status != instances.MemberRunning || !w1.UpdatedAt.Equal(at(2*time.Second)) {
		t.Fatalf("another workload's member moved: %q at %v", w1.Status, w1.UpdatedAt)
	}
	if m := status(members(other))[theirs.ID]; m.Status != instances.MemberDeploying {
		t.Fatalf("another instance's member moved: %q", m.Status)
	}

	// No workload: every member not yet removed; nil containers kept.
	noErr(t, "all removed", q.SetInstanceMembersStatus(ctx, i.ID, "", instances.MemberRemoved, nil, at(2*time.Minute)))
	byID = status(members(i))
	for id, m := range byID {
		wantAt := at(2 * time.Minute)
		if id == old.ID {
			wantAt = t0
		}
		if m.Status != instances.MemberRemoved || !m.UpdatedAt.Equal(wantAt) {
			t.Fatalf("member %s after removing all: %q at %v; want removed at %v", id, m.Status, m.UpdatedAt, wantAt)
		}
	}
	sameJSON(t, "containers kept", byID[w2a.ID].ContainerIDs, ids)
	sameJSON(t, "no containers reads as []", byID[empty.ID].ContainerIDs, []byte(`[]`))
	if m := status(members(other))[theirs.ID]; m.Status != instances.MemberDeploying {
		t.Fatalf("another instance's member moved: %q", m.Status)
	}

	// Pagination over many members.
	many := mkInstance(t, s, newInstance(o, p, "mem-many", "1", instances.StatusRunning))
	noErr(t, "bulk members", s.InTx(ctx, func(q instances.Queries) error {
		for n := 0; n <= storage.MaxPageLimit; n++ {
			m := instances.InstanceMember{ID: newID(), InstanceID: many.ID, AllocationID: "a", NodeID: "n", Role: instances.RolePrimary,
				Status: instances.MemberRunning, Version: "1", Digest: "d", WorkloadName: "w", CreatedAt: t0, UpdatedAt: t0}
			if err := q.InsertInstanceMember(ctx, m); err != nil {
				return err
			}
		}
		return nil
	}))
	if n := len(pageAll(t, 100, func(pg storage.Page) ([]instances.InstanceMember, string, error) {
		return q.ListInstanceMembers(ctx, many.ID, pg)
	})); n != storage.MaxPageLimit+1 {
		t.Fatalf("paged members: %d, want %d", n, storage.MaxPageLimit+1)
	}
	checkClamp(t, storage.MaxPageLimit+1, func(pg storage.Page) ([]instances.InstanceMember, string, error) {
		return q.ListInstanceMembers(ctx, many.ID, pg)
	})
}

func testUIOpenCodes(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "ui")
	i := mkInstance(t, s, newInstance(o, p, "ui", "1", instances.StatusRunning))
	issue := func(c instances.UIOpenCode) error {
		return s.Mutate(ctx, func(tx instances.Tx) error {
			if err := tx.InsertUIOpenCode(ctx, c); err != nil {
				return err
			}
			return audited(tx)
		})
	}
	c := instances.UIOpenCode{CodeHash: "code-" + newID(), UserID: newID(), OrgID: o.ID, ProjectID: p.ID, InstanceID: i.ID, Port: 8888,
		CreatedAt: t0, ExpiresAt: at(time.Minute)}
	noErr(t, "issue", issue(c))
	wantErr(t, "issue the same code twice", issue(c), storage.ErrAlreadyExists)

	// Looking a code up does not use it.
	for range 2 {
		got, err := q.UsableUIOpenCode(ctx, c.CodeHash, i.ID, at(time.Second))
		noErr(t, "usable", err)
		same(t, "usable code", got, c)
	}
	_, err := q.UsableUIOpenCode(ctx, c.CodeHash, newID(), at(time.Second))
	wantErr(t, "usable for another instance", err, storage.ErrNotFound)
	_, err = q.UsableUIOpenCode(ctx, c.CodeHash, i.ID, at(time.Minute))
	wantErr(t, "usable at expiry", err, storage.ErrNotFound)

	_, err = q.RedeemUIOpenCode(ctx, c.CodeHash, newID(), at(time.Second))
	wantErr(t, "redeem for another instance", err, storage.ErrNotFound)
	_, err = q.RedeemUIOpenCode(ctx, "code-"+newID(), i.ID, at(time.Second))
	wantErr(t, "redeem an unknown code", err, storage.ErrNotFound)
	got, err := q.RedeemUIOpenCode(ctx, c.CodeHash, i.ID, at(30*time.Second))
	noErr(t, "redeem", err)
	want := c
	want.UsedAt = at(30 * time.Second)
	same(t, "redeemed code", got, want)
	_, err = q.RedeemUIOpenCode(ctx, c.CodeHash, i.ID, at(31*time.Second))
	wantErr(t, "redeem twice", err, storage.ErrNotFound)
	_, err = q.UsableUIOpenCode(ctx, c.CodeHash, i.ID, at(31*time.Second))
	wantErr(t, "usable once used", err, storage.ErrNotFound)

	// Expired: refused at its expiry, and after.
	e := c
	e.CodeHash, e.CreatedAt, e.ExpiresAt = "code-"+newID(), at(time.Minute), at(2*time.Minute)
	noErr(t, "issue", issue(e))
	_, err = q.RedeemUIOpenCode(ctx, e.CodeHash, i.ID, at(2*time.Minute))
	wantErr(t, "redeem at expiry", err, storage.ErrNotFound)
	_, err = q.RedeemUIOpenCode(ctx, e.CodeHash, i.ID, at(3*time.Minute))
	wantErr(t, "redeem after expiry", err, storage.ErrNotFound)
	got, err = q.RedeemUIOpenCode(ctx, e.CodeHash, i.ID, at(2*time.Minute-time.Millisecond))
	noErr(t, "redeem just before expiry", err)
	if !got.UsedAt.Equal(at(2*time.Minute - time.Millisecond)) {
		t.Fatalf("used at %v", got.UsedAt)
	}

	// Issuing prunes codes expired over an hour before; younger ones stay.
	young := c
	young.CodeHash, young.CreatedAt, young.ExpiresAt = "code-"+newID(), at(3*time.Hour), at(3*time.Hour+time.Minute)
	old := c
	old.CodeHash, old.CreatedAt, old.ExpiresAt = "code-"+newID(), at(time.Hour), at(2*time.Hour+30*time.Minute)
	noErr(t, "issue old", issue(old))
	noErr(t, "issue young", issue(young))
	noErr(t, "reissue the first code (pruned)", issue(c))
	got, err = q.RedeemUIOpenCode(ctx, old.CodeHash, i.ID, at(2*time.Hour))
	noErr(t, "an unpruned code redeems", err)
	if got.CodeHash != old.CodeHash {
		t.Fatalf("redeemed %q", got.CodeHash)
	}
}

// Health is written only by UpdateAppInstanceHealth, and the lifecycle's
// conditional update leaves it alone (and the other way round);
// HeartbeatsOverdue finds running, not yet degraded instances past due.
func testInstanceHealth(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "health")
	i := mkInstance(t, s, newInstance(o, p, "hb", "1", instances.StatusRunning))
	late := mkInstance(t, s, newInstance(o, p, "hb-late", "1", instances.StatusRunning))
	stopped := mkInstance(t, s, newInstance(o, p, "hb-stopped", "1", instances.StatusFailed))
	h := instances.Health{State: instances.HealthHealthy, Reason: "warm", ChangedAt: at(time.Second), LastHeartbeatAt: at(2 * time.Second),
		HeartbeatTimeoutSeconds: 30, HeartbeatDueAt: at(32 * time.Second), StartReportedSeq: 3}
	noErr(t, "health", q.UpdateAppInstanceHealth(ctx, i.ID, h))
	got, err := q.GetAppInstanceByID(ctx, i.ID)
	noErr(t, "get", err)
	same(t, "health round trip", got.Health, h)
	wantErr(t, "health of a missing instance", q.UpdateAppInstanceHealth(ctx, newID(), h), storage.ErrNotFound)

	next := got
	next.Health, next.ReasonCode, next.UpdatedAt = instances.Health{State: instances.HealthDegraded}, "x", at(time.Hour)
	noErr(t, "lifecycle update", s.Mutate(ctx, func(tx instances.Tx) error {
		if err := tx.UpdateAppInstance(ctx, next, instances.StatusRunning); err != nil {
			return err
		}
		return audited(tx)
	}))
	got, _ = q.GetAppInstanceByID(ctx, i.ID)
	same(t, "health after a lifecycle update", got.Health, h)
	noErr(t, "lock", s.InTx(ctx, func(q instances.Queries) error {
		locked, err := q.LockAppInstance(ctx, i.ID)
		if err == nil && locked.Health != h {
			t.Errorf("locked health %+v, want %+v", locked.Health, h)
		}
		return err
	}))

	for _, x := range []instances.AppInstance{late, stopped} {
		noErr(t, "due", q.UpdateAppInstanceHealth(ctx, x.ID, instances.Health{State: instances.HealthHealthy, HeartbeatTimeoutSeconds: 10, HeartbeatDueAt: at(5 * time.Second)}))
	}
	overdue, err := q.HeartbeatsOverdue(ctx, at(10*time.Second), 3600, 10)
	noErr(t, "overdue", err)
	same(t, "overdue at +10s (running only)", instanceIDs(overdue), []string{late.ID})
	overdue, _ = q.HeartbeatsOverdue(ctx, at(40*time.Second), 3600, 10)
	same(t, "overdue at +40s, earliest due first", instanceIDs(overdue), []string{late.ID, i.ID})
	overdue, _ = q.HeartbeatsOverdue(ctx, at(40*time.Second), 29, 10)
	same(t, "overdue at +40s, heard for 29 s (timeouts of 30 s not judged yet)", instanceIDs(overdue), []string{late.ID})
	noErr(t, "degrade", q.UpdateAppInstanceHealth(ctx, late.ID, instances.Health{State: instances.HealthDegraded, HeartbeatTimeoutSeconds: 10, HeartbeatDueAt: at(5 * time.Second)}))
	overdue, _ = q.HeartbeatsOverdue(ctx, at(40*time.Second), 3600, 10)
	same(t, "a degraded instance is not overdue again", instanceIDs(overdue), []string{i.ID})
}

// A reported timeline row is written once per dedupe key, across instances.
func testReportedInstanceEvents(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "reported")
	i := mkInstance(t, s, newInstance(o, p, "rep", "1", instances.StatusRunning))
	e := instances.InstanceEvent{ID: newID(), InstanceID: i.ID, ProjectID: p.ID, EventType: "member_failed", Status: instances.StatusRunning,
		CorrelationID: "c", Payload: []byte(`{"member": "w-1"}`), OccurredAt: at(time.Second), DedupeKey: "runtime:" + p.ID + ":s:1"}
	again := e
	again.ID = newID()
	written, err := q.InsertReportedInstanceEvents(ctx, []instances.InstanceEvent{e, again})
	noErr(t, "insert", err)
	if !written[e.ID] || written[again.ID] {
		t.Fatalf("a batch with one key twice wrote %v", written)
	}
	later := again
	later.ID = newID()
	other := e
	other.ID, other.DedupeKey = newID(), "runtime:"+p.ID+":s:2"
	written, err = q.InsertReportedInstanceEvents(ctx, []instances.InstanceEvent{later, other})
	noErr(t, "repeat", err)
	if written[later.ID] || !written[other.ID] {
		t.Fatalf("a repeat beside a new event wrote %v", written)
	}
	got, _, err := q.ListInstanceEvents(ctx, i.ID, storage.Page{Limit: 10})
	noErr(t, "list", err)
	if len(got) != 2 || got[0].DedupeKey != e.DedupeKey || got[1].DedupeKey != other.DedupeKey {
		t.Fatalf("timeline %+v", got)
	}
	noKey := e
	noKey.ID, noKey.DedupeKey = newID(), ""
	if _, err := q.InsertReportedInstanceEvents(ctx, []instances.InstanceEvent{noKey}); err == nil {
		t.Fatal("a reported event without a dedupe key was written")
	}

	// Retention: the oldest reported rows past the cap go, in batches;
	// the platform's own row (no dedupe key) stays.
	noErr(t, "lifecycle row", q.InsertInstanceEvent(ctx, noKey))
	var newest []string
	for n := range 3 {
		r := e
		r.ID, r.DedupeKey = newID(), fmt.Sprintf("runtime:%s:s:n%d", p.ID, n)
		newest = append(newest, r.ID)
		_, err := q.InsertReportedInstanceEvents(ctx, []instances.InstanceEvent{r})
		noErr(t, "insert newer", err)
	}
	over, err := q.InstancesOverReportedCap(ctx, 3, 10, "")
	noErr(t, "over cap", err)
	same(t, "instances over a cap of 3", over, []string{i.ID})
	// A later pass looks only at instances with a row from its start on:
	// this one, from its newest row's id; not from an id minted after it.
	newestID, err := q.NewestReportedEventID(ctx)
	noErr(t, "newest reported id", err)
	if newestID < newest[2] {
		t.Fatalf("newest reported id %s, before this instance's newest %s", newestID, newest[2])
	}
	over, err = q.InstancesOverReportedCap(ctx, 3, 10, newest[2])
	noErr(t, "over cap since its newest row", err)
	same(t, "instances over the cap with a row from its newest on", over, []string{i.ID})
	over, err = q.InstancesOverReportedCap(ctx, 3, 10, newID())
	noErr(t, "over cap since now", err)
	if slices.Contains(over, i.ID) {
		t.Fatalf("an instance with no row since the pass began was counted: %v", over)
	}
	for _, want := range []int64{1, 1, 0} {
		n, err := q.PruneReportedInstanceEvents(ctx, i.ID, 3, 1)
		noErr(t, "prune", err)
		if n != want {
			t.Fatalf("a prune in batches of 1 deleted %d, want %d", n, want)
		}
	}
	got, _, err = q.ListInstanceEvents(ctx, i.ID, storage.Page{Limit: 10})
	noErr(t, "list after prune", err)
	ids := make([]string, len(got))
	for k, g := range got {
		ids[k] = g.ID
	}
	same(t, "timeline after prune", ids, append([]string{noKey.ID}, newest...))
	over, err = q.InstancesOverReportedCap(ctx, 3, 10, "")
	noErr(t, "over cap after prune", err)
	same(t, "instances over the cap after prune", len(over), 0)
}

// HostPortsHeld: the ports of a node's instances that are not yet
// decommissioned, each with its holder.
func testHostPortsHeld(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	o, p := tenant(t, db, "ports")
	node, elsewhere := newID(), newID()
	mk := func(port int, nodeID string, status instances.InstanceStatus) instances.AppInstance {
		i := newInstance(o, p, "p", "1", status)
		i.HostPort, i.NodeID = port, nodeID
		return mkInstance(t, s, i)
	}
	running, failed := mk(18000, node, instances.StatusRunning), mk(18001, node, instances.StatusFailed)
	mk(18002, node, instances.StatusDecommissioned)
	mk(18003, elsewhere, instances.StatusRunning)
	mk(0, node, instances.StatusRunning)
	held, err := s.Read().HostPortsHeld(ctx, node)
	noErr(t, "held", err)
	same(t, "ports held on the node", held, map[int]string{18000: running.ID, 18001: failed.ID})
}

// Added members: every column round-trips, UpdateInstanceMember writes one
// member of one instance, AddedMembersOn finds the live added members of a
// node or an allocation, and a workload-wide status change leaves added
// members to their own writes unless it covers every member.
func testAddedMembers(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "added")
	i := mkInstance(t, s, newInstance(o, p, "cluster", "1", instances.StatusRunning))
	other := mkInstance(t, s, newInstance(o, p, "cluster-other", "1", instances.StatusRunning))
	node, alloc := newID(), newID()
	mk := func(inst instances.AppInstance, name, nodeID, allocID string, st instances.MemberStatus) instances.InstanceMember {
		m := instances.InstanceMember{ID: newID(), InstanceID: inst.ID, AllocationID: allocID, NodeID: nodeID, Role: "worker", Status: st,
			Version: "1", Digest: "sha256:w", WorkloadName: "gpuaas-" + inst.ID + "-" + name, ContainerIDs: []byte(`[]`), CreatedAt: t0, UpdatedAt: t0,
			Name: name, Added: true, TaskID: newID(), KeyID: newID(), GPUUUIDs: []string{"GPU-a", "GPU-b"}}
		noErr(t, "insert "+name, q.InsertInstanceMember(ctx, m))
		return m
	}
	w1 := mk(i, "worker-1", node, alloc, instances.MemberRunning)
	got, err := q.GetInstanceMember(ctx, i.ID, w1.ID)
	noErr(t, "get", err)
	same(t, "added member round trip", got, w1)
	_, err = q.GetInstanceMember(ctx, other.ID, w1.ID)
	wantErr(t, "member of another instance", err, storage.ErrNotFound)

	w2 := mk(i, "worker-2", node, newID(), instances.MemberDeploying)
	gone := mk(i, "worker-3", node, alloc, instances.MemberRemoved)
	theirs := mk(other, "worker-1", newID(), alloc, instances.MemberRunning)
	own := instances.InstanceMember{ID: newID(), InstanceID: i.ID, AllocationID: alloc, NodeID: node, Role: instances.RolePrimary,
		Status: instances.MemberRunning, Version: "1", Digest: "sha256:p", WorkloadName: "gpuaas-" + i.ID + "-1", CreatedAt: t0, UpdatedAt: t0}
	noErr(t, "insert own", q.InsertInstanceMember(ctx, own))
	ids := func(ms []instances.InstanceMember, err error) []string {
		t.Helper()
		noErr(t, "added members on", err)
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(v ...string) []string { slices.Sort(v); return v }
	same(t, "added members on the node", ids(q.AddedMembersOn(ctx, "", node)), sorted(w1.ID, w2.ID))
	same(t, "added members on the allocation", ids(q.AddedMembersOn(ctx, alloc, "")), sorted(w1.ID, theirs.ID))

	w1.Status, w1.ReasonCode, w1.ReasonMessage, w1.UpdatedAt = instances.MemberFailed, instances.ReasonNodeLost, "node gone", at(time.Minute)
	w1.Version, w1.Digest, w1.TaskID, w1.KeyID, w1.GPUUUIDs, w1.ContainerIDs = "2", "sha256:w2", newID(), newID(), []string{"GPU-c"}, []byte(`["c-9"]`)
	noErr(t, "update", q.UpdateInstanceMember(ctx, w1))
	got, err = q.GetInstanceMember(ctx, i.ID, w1.ID)
	noErr(t, "get updated", err)
	sameJSON(t, "updated containers", got.ContainerIDs, w1.ContainerIDs)
	got.ContainerIDs, w1.ContainerIDs = nil, nil
	same(t, "updated member", got, w1)
	if g, _ := q.GetInstanceMember(ctx, i.ID, w2.ID); g.Status != instances.MemberDeploying || !g.UpdatedAt.Equal(t0) {
		t.Fatalf("another member moved: %q at %v", g.Status, g.UpdatedAt)
	}
	wrong := w2
	wrong.InstanceID = other.ID
	wantErr(t, "update through another instance", q.UpdateInstanceMember(ctx, wrong), storage.ErrNotFound)

	// Removing every member of the instance covers added ones too.
	noErr(t, "remove all", q.SetInstanceMembersStatus(ctx, i.ID, "", instances.MemberRemoved, nil, at(time.Hour)))
	same(t, "no added members left on the node", ids(q.AddedMembersOn(ctx, "", node)), []string(nil))
	if g, _ := q.GetInstanceMember(ctx, i.ID, gone.ID); !g.UpdatedAt.Equal(t0) {
		t.Fatalf("a removed member moved again: %v", g.UpdatedAt)
	}
	if g, _ := q.GetInstanceMember(ctx, other.ID, theirs.ID); g.Status != instances.MemberRunning {
		t.Fatalf("another instance's member moved: %q", g.Status)
	}
}

// RunningMemberReports: every running added member on a ready or draining
// node, with that node's stored report and its instance's backend, by node
// then member; not a member deploying, failed or removed, not the primary
// (not added), not one on a down or joining node.
func testRunningMemberReports(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	ns := store.Nodes(db)
	o, p := tenant(t, db, "reports")
	i := mkInstance(t, s, newInstance(o, p, "cluster", "1", instances.StatusRunning))
	wi := newInstance(o, p, "cluster-worker", "1", instances.StatusRunning)
	wi.RuntimeBackend = "external_worker"
	worker := mkInstance(t, s, wi)
	report := func(state nodes.NodeState, workloads string, at time.Time) nodes.Node {
		n := mkNode(t, ns, "n-"+newID()[:8], state, 1, at)
		noErr(t, "set workloads", ns.Read().SetNodeWorkloads(ctx, n.ID, []byte(workloads), at))
		return n
	}
	ready := report(nodes.StateReady, `[{"name":"/a","state":"running"}]`, at(time.Minute))
	draining := report(nodes.StateDraining, `[{"name":"b","state":"exited"}]`, at(2*time.Minute))
	down := report(nodes.StateDown, `[]`, at(3*time.Minute))
	joining := report(nodes.StateJoining, `[]`, at(4*time.Minute))
	quiet := report(nodes.StateReady, `[]`, at(5*time.Minute)) // has no members
	mk := func(inst instances.AppInstance, n nodes.Node, st instances.MemberStatus, added bool) instances.InstanceMember {
		m := instances.InstanceMember{ID: newID(), InstanceID: inst.ID, AllocationID: newID(), NodeID: n.ID, Role: "worker", Status: st,
			Version: "1", Digest: "sha256:w", WorkloadName: "w-" + newID()[:8], ContainerIDs: []byte(`[]`), CreatedAt: t0, UpdatedAt: t0,
			Name: "worker", Added: added, GPUUUIDs: []string{"GPU-a"}}
		if !added {
			m.Role, m.Name = instances.RolePrimary, ""
		}
		noErr(t, "insert member", q.InsertInstanceMember(ctx, m))
		return m
	}
	r1, r2 := mk(i, ready, instances.MemberRunning, true), mk(worker, ready, instances.MemberRunning, true)
	d1 := mk(i, draining, instances.MemberRunning, true)
	mk(i, ready, instances.MemberDeploying, true)
	mk(i, ready, instances.MemberFailed, true)
	mk(i, ready, instances.MemberRemoved, true)
	mk(i, ready, instances.MemberRunning, false)
	mk(i, down, instances.MemberRunning, true)
	mk(i, joining, instances.MemberRunning, true)

	got, err := q.RunningMemberReports(ctx)
	noErr(t, "running member reports", err)
	// Other cases' rows share the database: keep this case's nodes.
	got = slices.DeleteFunc(got, func(r instances.MemberReport) bool {
		return !slices.Contains([]string{ready.ID, draining.ID, down.ID, joining.ID, quiet.ID}, r.Member.NodeID)
	})
	type row struct {
		Member, Node, Backend string
		At                    time.Time
	}
	var rows []row
	for _, r := range got {
		rows = append(rows, row{r.Member.ID, r.Member.NodeID, r.Backend, r.ReportedAt})
	}
	want := []row{{r1.ID, ready.ID, "docker", at(time.Minute)}, {r2.ID, ready.ID, "external_worker", at(time.Minute)},
		{d1.ID, draining.ID, "docker", at(2 * time.Minute)}}
	slices.SortFunc(want, func(a, b row) int { return strings.Compare(a.Node+a.Member, b.Node+b.Member) })
	same(t, "running added members on ready and draining nodes, by node", rows, want)
	for _, r := range got {
		switch r.Member.ID {
		case r1.ID:
			r.Member.ContainerIDs, r1.ContainerIDs = nil, nil
			same(t, "the member's columns", r.Member, r1)
			sameJSON(t, "the ready node's report", r.Workloads, []byte(`[{"name":"/a","state":"running"}]`))
		case d1.ID:
			sameJSON(t, "the draining node's report", r.Workloads, []byte(`[{"name":"b","state":"exited"}]`))
		}
	}
}

// Worker operations: the platform's driver never sees them; a worker
// acquires the app's available ones under a lease (one winner), finds the
// one it holds again, extends only its own lease, and the deadline sweep
// and the state hand-over read what they need. Grants round-trip.
func testWorkerOperations(t *testing.T, db *store.DB) {
	ctx := context.Background()
	s := store.Instances(db)
	q := s.Read()
	o, p := tenant(t, db, "workers")
	i := mkInstance(t, s, newInstance(o, p, "slurm", "1", instances.StatusRequested))
	other := mkInstance(t, s, newInstance(o, p, "ray", "1", instances.StatusRequested))
	mk := func(inst instances.AppInstance, created time.Time, deadline time.Time) instances.InstanceOperation {
		op := newOperation(inst, instances.OpCreate, created)
		op.Executor, op.AppSlug, op.DeadlineAt = instances.ExecutorWorker, inst.AppSlug, deadline
		noErr(t, "insert worker op", q.InsertInstanceOperation(ctx, op))
		return op
	}
	a := mk(i, t0, at(time.Hour))
	b := mk(i, at(time.Second), at(time.Minute))
	theirs := mk(other, t0, at(time.Hour))
	got, err := q.GetWorkerOperation(ctx, "slurm", a.ID)
	noErr(t, "get", err)
	same(t, "worker op round trip", got, a)
	_, err = q.GetWorkerOperation(ctx, "ray", a.ID)
	wantErr(t, "another app's operation", err, storage.ErrNotFound)
	open, err := q.OpenInstanceOperations(ctx, at(time.Second), 100)
	noErr(t, "open", err)
	for _, op := range open {
		if op.Executor == instances.ExecutorWorker {
			t.Fatalf("the driver sees worker operation %s", op.ID)
		}
	}
	ids := func(ops []instances.InstanceOperation, err error) []string {
		t.Helper()
		noErr(t, "list", err)
		var out []string
		for _, op := range ops {
			out = append(out, op.ID)
		}
		return out
	}
	same(t, "available", ids(q.AvailableWorkerOperations(ctx, "slurm", t0, 10)), []string{a.ID, b.ID})
	won, err := q.LeaseWorkerOperation(ctx, a.ID, "sa:w1", "lease-1", t0, at(time.Minute))
	noErr(t, "lease", err)
	lost, err := q.LeaseWorkerOperation(ctx, a.ID, "sa:w2", "lease-2", at(time.Second), at(time.Minute))
	noErr(t, "second lease", err)
	if !won || lost {
		t.Fatalf("lease: first %v, second %v", won, lost)
	}
	same(t, "available while leased", ids(q.AvailableWorkerOperations(ctx, "slurm", at(time.Second), 10)), []string{b.ID})
	held, err := q.HeldWorkerOperation(ctx, "slurm", "sa:w1", at(time.Second))
	noErr(t, "held", err)
	if held.ID != a.ID || held.LeaseID != "lease-1" || held.Attempt != 1 || !held.LeaseExpiresAt.Equal(at(time.Minute)) {
		t.Fatalf("held: %+v", held)
	}
	_, err = q.HeldWorkerOperation(ctx, "slurm", "sa:w2", at(time.Second))
	wantErr(t, "held by another", err, storage.ErrNotFound)
	if ok, err := q.ExtendWorkerLease(ctx, a.ID, "lease-2", at(2*time.Minute), "x"); err != nil || ok {
		t.Fatalf("extend with another's lease: %v %v", ok, err)
	}
	if ok, err := q.ExtendWorkerLease(ctx, a.ID, "lease-1", at(2*time.Minute), "controller up"); err != nil || !ok {
		t.Fatalf("extend: %v %v", ok, err)
	}
	// Expired: another worker takes it, attempt 2.
	if ok, err := q.LeaseWorkerOperation(ctx, a.ID, "sa:w2", "lease-3", at(3*time.Minute), at(4*time.Minute)); err != nil || !ok {
		t.Fatalf("lease after expiry: %v %v", ok, err)
	}
	got, _ = q.GetWorkerOperation(ctx, "slurm", a.ID)
	if got.LeaseOwner != "sa:w2" || got.LeaseID != "lease-3" || got.Attempt != 2 || got.Progress != "controller up" {
		t.Fatalf("after the takeover: %+v", got)
	}
	same(t, "overdue", ids(q.OverdueWorkerOperations(ctx, at(2*time.Minute), 10)), []string{b.ID})

	// The newest kept state is the instance's.
	st, err := q.LastWorkerState(ctx, i.ID)
	noErr(t, "no state yet", err)
	if st != nil {
		t.Fatalf("state before any: %s", st)
	}
	got.State, got.Phase, got.WorkerState, got.CompletedAt = instances.OpSucceeded, "done", []byte(`{"n":1}`), at(5*time.Minute)
	noErr(t, "complete a", q.UpdateInstanceOperation(ctx, got, "start"))
	b.State, b.Phase, b.CompletedAt = instances.OpFailed, "done", at(6*time.Minute)
	noErr(t, "fail b without state", q.UpdateInstanceOperation(ctx, b, "start"))
	st, err = q.LastWorkerState(ctx, i.ID)
	noErr(t, "state", err)
	sameJSON(t, "state", st, []byte(`{"n":1}`))
	if st, _ := q.LastWorkerState(ctx, theirs.InstanceID); st != nil {
		t.Fatalf("another instance's state: %s", st)
	}

	g := instances.AppWorkerGrant{AppSlug: "slurm", ServiceAccountID: newID(), ProjectID: p.ID, GrantedBy: "user:1", CreatedAt: t0}
	noErr(t, "grant", q.PutAppWorkerGrant(ctx, g))
	wantErr(t, "grant twice", q.PutAppWorkerGrant(ctx, g), storage.ErrAlreadyExists)
	gg, err := q.GetAppWorkerGrant(ctx, "slurm", g.ServiceAccountID)
	noErr(t, "get grant", err)
	same(t, "grant round trip", gg, g)
	_, err = q.GetAppWorkerGrant(ctx, "ray", g.ServiceAccountID)
	wantErr(t, "grant of another app", err, storage.ErrNotFound)
	list, _, err := q.ListAppWorkerGrants(ctx, "slurm", storage.Page{Limit: 10})
	noErr(t, "list grants", err)
	if len(list) != 1 {
		t.Fatalf("grants: %v", list)
	}
	noErr(t, "revoke", q.DeleteAppWorkerGrant(ctx, "slurm", g.ServiceAccountID))
	wantErr(t, "revoke twice", q.DeleteAppWorkerGrant(ctx, "slurm", g.ServiceAccountID), storage.ErrNotFound)
}
