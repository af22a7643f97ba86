package instances_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// These tests drive the state machine against a real database (both
// dialects) with the node side replaced by an in-memory queue whose tasks
// the test completes: the one layer under test is the domain. The real
// agent walk lives in the httpapi end-to-end tests.

const digestV1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
const digestV2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
const digestV3 = "sha256:3333333333333333333333333333333333333333333333333333333333333333"

type fakeTask struct {
	id, node, kind, instance string
	payload                  any
	done                     bool
	result                   nodeapi.TaskResult
}

type fakeQueue struct {
	mu    sync.Mutex
	tasks []*fakeTask
}

func (f *fakeQueue) Enqueue(_ context.Context, _ storage.Tx, nodeID, kind, instanceID, _ string, payload any) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTask{id: iam.NewID(), node: nodeID, kind: kind, instance: instanceID, payload: payload}
	f.tasks = append(f.tasks, t)
	return t.id, nil
}

func (f *fakeQueue) Outcome(_ context.Context, id string) (instances.TaskOutcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.tasks {
		if t.id == id {
			return instances.TaskOutcome{Done: t.done, Result: t.result}, nil
		}
	}
	return instances.TaskOutcome{}, store.ErrNotFound
}

// pending returns the open tasks, oldest first.
func (f *fakeQueue) pending() []*fakeTask {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*fakeTask
	for _, t := range f.tasks {
		if !t.done {
			out = append(out, t)
		}
	}
	return out
}

// complete ends every open task: runs with res (or success), the rest
// successfully.
func (f *fakeQueue) complete(t *testing.T, run nodeapi.TaskResult) []string {
	t.Helper()
	var kinds []string
	for _, task := range f.pending() {
		f.mu.Lock()
		task.done = true
		kinds = append(kinds, task.kind)
		switch task.kind {
		case nodeapi.KindContainerRun, nodeapi.KindComposeUp:
			task.result = run
			if run.State == "" {
				payload, _ := json.Marshal(task.payload)
				digests, _ := nodeapi.PinnedDigests(task.kind, payload)
				out, _ := json.Marshal(nodeapi.RunOutput{ContainerIDs: []string{"c-" + task.id}, Ports: []nodeapi.PortMapping{{Container: 8080, Host: 31000}},
					HostAddress: "10.0.0.7", ImageDigests: digests})
				task.result = nodeapi.TaskResult{State: nodeapi.ResultSucceeded, Output: out}
			}
		case nodeapi.KindTeardownVerify:
			out, _ := json.Marshal(nodeapi.VerifyOutput{Remaining: []string{}})
			task.result = nodeapi.TaskResult{State: nodeapi.ResultSucceeded, Output: out}
		default:
			task.result = nodeapi.TaskResult{State: nodeapi.ResultSucceeded}
		}
		f.mu.Unlock()
	}
	return kinds
}

type fakeAllocs struct {
	list []instances.Allocation
	// placing, when set, runs once as a launch's placement reads the
	// allocations: after the version was resolved, before anything is
	// recorded.
	placing func()
}

func (f *fakeAllocs) place() {
	if hook := f.placing; hook != nil {
		f.placing = nil
		hook()
	}
}

func (f *fakeAllocs) Allocation(_ context.Context, _ storage.Tx, id string) (instances.Allocation, error) {
	f.place()
	for _, a := range f.list {
		if a.ID == id {
			return a, nil
		}
	}
	return instances.Allocation{}, store.ErrNotFound
}

func (f *fakeAllocs) ProjectAllocations(_ context.Context, _ storage.Tx, projectID string) ([]instances.Allocation, error) {
	f.place()
	var out []instances.Allocation
	for _, a := range f.list {
		if a.ProjectID == projectID {
			out = append(out, a)
		}
	}
	return out, nil
}

type passGate struct{}

func (passGate) VersionArtifactsReady(context.Context, storage.Tx, string, string, []manifest.Artifact) error {
	return nil
}

type fixture struct {
	db      *store.DB
	svc     *instances.Service
	cat     *catalog.Service
	q       *fakeQueue
	allocs  *fakeAllocs
	ctx     context.Context
	g       *iam.Grants
	project iam.Project
	other   iam.Project
	allocID string
}

func newFixture(t *testing.T, d store.Dialect) *fixture {
	t.Helper()
	db := storetest.Open(t, d)
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	iamSvc := &iam.Service{Store: store.IAM(db), Logger: logger}
	admin := principal.Principal{Type: principal.User, ID: iam.NewID()}
	now := time.Now()
	q := db.Queries()
	must(t, q.CreateRoleBinding(ctx, iam.RoleBinding{ID: iam.NewID(), PrincipalType: "user", PrincipalID: admin.ID,
		Role: iam.RolePlatformAdmin, ScopeType: iam.ScopePlatform, CreatedAt: now}))
	org, p, other := mkTenant(t, q)
	g, err := iam.LoadGrants(ctx, q, admin)
	must(t, err)
	ctx = principal.With(ctx, admin)
	cat := catalog.NewService(catalog.Deps{Store: store.Catalog(db), IAM: iamSvc, Logger: logger, ArtifactGate: passGate{}})
	f := &fixture{db: db, cat: cat, q: &fakeQueue{}, ctx: ctx, g: g, project: p, other: other, allocID: iam.NewID()}
	// The project's allocation is a whole H100 host of eight GPUs, so tests
	// can keep several instances on it (each holds GPUs of its own).
	var uuids []string
	var gpus []nodeapi.GPU
	for _, c := range "abcdefgh" {
		uuids = append(uuids, "GPU-"+string(c))
		gpus = append(gpus, nodeapi.GPU{UUID: "GPU-" + string(c), Model: "NVIDIA H100 80GB HBM3", Vendor: "nvidia"})
	}
	f.allocs = &fakeAllocs{list: []instances.Allocation{
		{ID: f.allocID, OrgID: org.ID, ProjectID: p.ID, NodeID: "node-1", Shape: "gpu_slice", State: "active", GPUUUIDs: uuids, NodeState: "ready",
			Inventory: nodeapi.Inventory{CPUCores: 32, MemoryMiB: 256 << 10, Address: "gpu-7.example", GPUs: gpus}},
		{ID: "alloc-other", OrgID: org.ID, ProjectID: other.ID, NodeID: "node-2", Shape: "gpu_slice", State: "active", GPUUUIDs: []string{"GPU-c"}},
	}}
	sa := serviceaccounts.New(serviceaccounts.Deps{Store: store.ServiceAccounts(db), IAM: iamSvc, Logger: logger, TokenURL: func() string { return "http://api/token" }})
	f.svc = instances.New(instances.Deps{Store: store.Instances(db), IAM: iamSvc, SA: sa, Allocations: f.allocs, Tasks: f.q, Logger: logger,
		APIBaseURL: func() string { return "http://api" }})
	cat.AddInstanceGate(f.svc)
	for _, v := range []struct{ version, digest string }{{"1.0.0", digestV1}, {"2.0.0", digestV2}, {"3.0.0", digestV3}} {
		f.register(t, v.version, v.digest)
	}
	enabled := true
	_, err = cat.PutEntitlement(ctx, g, p.ID, "echo", catalog.EntitlementInput{Enabled: &enabled})
	must(t, err)
	return f
}

// mkTenant records the org acme with its projects ml and other.
func mkTenant(t *testing.T, q *store.Queries) (org iam.Org, ml, other iam.Project) {
	t.Helper()
	ctx, now := context.Background(), time.Now()
	org = iam.Org{ID: iam.NewID(), Slug: "acme", Name: "Acme", CreatedAt: now}
	must(t, q.CreateOrg(ctx, org))
	ml = iam.Project{ID: iam.NewID(), OrgID: org.ID, Slug: "ml", Name: "ML", CreatedAt: now}
	must(t, q.CreateProject(ctx, ml))
	other = iam.Project{ID: iam.NewID(), OrgID: org.ID, Slug: "other", Name: "Other", CreatedAt: now}
	must(t, q.CreateProject(ctx, other))
	return org, ml, other
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// register adds, verifies and publishes one version of echo with its
// artifact.
func (f *fixture) register(t *testing.T, version, digest string) {
	t.Helper()
	f.registerOCI(t, "echo", version, digest, `{gpu_count: {default: 1, min: 1, max: 4}, cpu_cores: {default: 2, min: 1, max: 64}}`, "")
}

// registerOCI adds, verifies and publishes version of a launchable_oci app
// slug running registry.local/apps/<slug>@digest, with the profile's
// resources and any more profile lines (indented as its keys).
func (f *fixture) registerOCI(t *testing.T, slug, version, digest, resources, more string) {
	t.Helper()
	m := fmt.Sprintf(`
app: {slug: %[1]s, display_name: %[1]s, runtime_backend: launchable_oci}
version:
  version: %[2]s
  compatibility: {requires_capacity_shape: [gpu_slice, baremetal], min_gpu_count: 1, supported_accelerators: [nvidia]}
  artifacts: [{name: runtime, artifact_kind: oci, source_type: oci_registry, repository: apps/%[1]s}]
  runtime_profile:
    kind: launchable_oci
    image_ref: registry.local/apps/%[1]s@%[3]s
    ports: [{container: 8080, expose: private_host_local}]
    readiness: {type: http, path: /healthz, port: 8080}
    resources: %[4]s
%[5]s`, slug, version, digest, resources, more)
	_, err := f.cat.RegisterManifest(f.ctx, f.g, []byte(m), catalog.SyntaxYAML)
	must(t, err)
	now := time.Now()
	must(t, f.db.Queries().InsertAppArtifact(f.ctx, artifacts.AppArtifact{ID: iam.NewID(), OrgID: f.project.OrgID, ProjectID: f.project.ID,
		AppSlug: slug, AppVersion: version, ArtifactName: "runtime", ArtifactKind: "oci", SourceType: "oci_registry", Repository: "apps/" + slug,
		Digest: digest, LifecycleState: "active", TrustState: "verified", CreatedBy: "t", CreatedAt: now, UpdatedAt: now}))
	_, err = f.cat.TransitionVersion(f.ctx, f.g, slug, version, "publish", "test")
	must(t, err)
}

func (f *fixture) drive(t *testing.T) {
	t.Helper()
	must(t, f.svc.Drive(f.ctx, "test-driver"))
}

func (f *fixture) get(t *testing.T, id string) instances.AppInstance {
	t.Helper()
	inst, err := f.svc.Get(f.ctx, f.g, f.project.ID, id)
	must(t, err)
	return inst
}

func (f *fixture) eventTypes(t *testing.T, id string) []string {
	t.Helper()
	es, _, err := f.svc.Events(f.ctx, f.g, f.project.ID, id, store.Page{Limit: 500})
	must(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.EventType)
	}
	return out
}

func fieldCode(t *testing.T, err error) (string, string) {
	t.Helper()
	e, ok := errdefs.As(err)
	if !ok {
		t.Fatalf("not a classified error: %v", err)
	}
	fs, _ := e.Details["fields"].([]errdefs.FieldError)
	if len(fs) == 0 {
		t.Fatalf("no field errors: %v", err)
	}
	return fs[0].Field, fs[0].Code
}

func TestLifecycle(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) { testLifecycle(t, d) })
}

func testLifecycle(t *testing.T, d store.Dialect) {
	f := newFixture(t, d)
	inst, op, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: "echo one",
		OperatingMode: "tenant_dedicated"})
	must(t, err)
	if inst.Status != instances.StatusRequested || inst.OperatingMode != "tenant_dedicated" || inst.ControlPlaneScope != "project" ||
		inst.RuntimeBackend != "launchable_oci" || inst.TenantBoundaryMode != "project_isolated" || op.State != instances.OpInProgress {
		t.Fatalf("created: %+v %+v", inst, op)
	}
	// Deploy: one container.run with the digest, the allocation's first GPU,
	// and the identity as a read-only file, never as env.
	f.drive(t)
	if got := f.get(t, inst.ID).Status; got != instances.StatusDeploying {
		t.Fatalf("after one pass: %s", got)
	}
	tasks := f.q.pending()
	if len(tasks) != 1 || tasks[0].kind != nodeapi.KindContainerRun {
		t.Fatalf("tasks: %+v", tasks)
	}
	run := tasks[0].payload.(nodeapi.ContainerRun)
	if run.Image.Digest != digestV1 || !slices.Equal(run.GPUUUIDs, []string{"GPU-a"}) || run.Readiness == nil || run.Readiness.HTTPPath != "/healthz" {
		t.Fatalf("run: %+v", run)
	}
	if len(run.Mounts) != 1 || run.Mounts[0].Kind != "file" || !run.Mounts[0].ReadOnly || !strings.Contains(string(run.Mounts[0].Content), "PRIVATE KEY") {
		t.Fatalf("identity mount: %+v", run.Mounts)
	}
	for k, v := range run.Env {
		if strings.Contains(v, "PRIVATE KEY") {
			t.Fatalf("private key in env %s", k)
		}
	}
	f.q.complete(t, nodeapi.TaskResult{})
	f.drive(t)
	got := f.get(t, inst.ID)
	if got.Status != instances.StatusRunning || got.Digest != digestV1 || got.ServiceAccountID == "" {
		t.Fatalf("running: %+v", got)
	}
	if a := instances.AccessOf(got); a == nil || a.HostPort != 31000 || a.SSHTunnel != "ssh -N -L 31000:10.0.0.7:31000 <user>@gpu-7.example" ||
		a.LocalURL != "http://127.0.0.1:31000/" {
		t.Fatalf("access: %+v", a)
	}
	opDone, err := f.svc.Operation(f.ctx, f.g, f.project.ID, op.ID)
	must(t, err)
	if opDone.State != instances.OpSucceeded {
		t.Fatalf("create op: %+v", opDone)
	}

	// A version in use cannot be retired.
	if _, err := f.cat.TransitionVersion(f.ctx, f.g, "echo", "1.0.0", "deprecate", "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cat.TransitionVersion(f.ctx, f.g, "echo", "1.0.0", "retire", "t"); err == nil {
		t.Fatal("retired a version a live instance runs")
	}
	if n, _ := f.db.Queries().CountLiveInstancesUsingDigest(f.ctx, "echo", digestV1); n != 1 {
		t.Fatalf("digest usage: %d", n)
	}
	if n, _ := f.db.Queries().CountLiveInstancesUsingDigest(f.ctx, "other-app", digestV1); n != 0 {
		t.Fatalf("digest usage counted for another app: %d", n)
	}

	// Upgrade to 2.0.0: remove old, run new.
	_, up, err := f.svc.Upgrade(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: "2.0.0"})
	must(t, err)
	// A second request while one runs: 409 operation_in_progress.
	if _, _, err := f.svc.Decommission(f.ctx, f.g, f.project.ID, inst.ID); errdefs.KindOf(err) != errdefs.KindConflict {
		t.Fatalf("concurrent decommission: %v", err)
	}
	for range 3 {
		f.drive(t)
		f.q.complete(t, nodeapi.TaskResult{})
	}
	f.drive(t)
	got = f.get(t, inst.ID)
	if got.Status != instances.StatusRunning || got.Version != "2.0.0" || got.Digest != digestV2 {
		t.Fatalf("upgraded: %+v", got)
	}
	if o, _ := f.svc.Operation(f.ctx, f.g, f.project.ID, up.ID); o.State != instances.OpSucceeded {
		t.Fatalf("upgrade op: %+v", o)
	}

	// Upgrade to 3.0.0 whose container exits: automatic revert to 2.0.0.
	_, up3, err := f.svc.Upgrade(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: "3.0.0"})
	must(t, err)
	f.drive(t)                            // queue removal of 2.0.0
	f.q.complete(t, nodeapi.TaskResult{}) // removed
	f.drive(t)                            // queue run of 3.0.0
	f.q.complete(t, nodeapi.TaskResult{State: nodeapi.ResultFailed, ReasonCode: nodeapi.ReasonContainerExited, LogTail: []string{"boom"}})
	for range 3 {
		f.drive(t)
		f.q.complete(t, nodeapi.TaskResult{})
	}
	f.drive(t)
	got = f.get(t, inst.ID)
	if got.Status != instances.StatusRunning || got.Version != "2.0.0" || got.Digest != digestV2 || got.ReasonCode != instances.ReasonUpgradeReverted {
		t.Fatalf("reverted: %+v", got)
	}
	if o, _ := f.svc.Operation(f.ctx, f.g, f.project.ID, up3.ID); o.State != instances.OpFailed || o.ReasonCode != nodeapi.ReasonContainerExited {
		t.Fatalf("reverted upgrade op: %+v", o)
	}
	if _, lines, _ := f.svc.Logs(f.ctx, f.g, f.project.ID, inst.ID); !slices.Equal(lines, []string{"boom"}) {
		t.Fatalf("log tail: %v", lines)
	}

	// Rollback to 1.0.0 (deprecated now, but the instance ran it).
	if _, _, err := f.svc.Rollback(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: "3.0.0"}); err == nil {
		t.Fatal("rolled back to a version never run")
	}
	_, _, err = f.svc.Rollback(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: "1.0.0"})
	must(t, err)
	for range 3 {
		f.drive(t)
		f.q.complete(t, nodeapi.TaskResult{})
	}
	f.drive(t)
	got = f.get(t, inst.ID)
	if got.Status != instances.StatusRunning || got.Version != "1.0.0" || got.Digest != digestV1 {
		t.Fatalf("rolled back: %+v", got)
	}

	// Decommission: teardown, verify, identity gone.
	_, dec, err := f.svc.Decommission(f.ctx, f.g, f.project.ID, inst.ID)
	must(t, err)
	f.drive(t)
	if kinds := f.q.complete(t, nodeapi.TaskResult{}); !slices.Equal(kinds, []string{nodeapi.KindContainerRemove, nodeapi.KindContainerRemove}) {
		t.Fatalf("teardown tasks: %v", kinds)
	}
	f.drive(t)
	if kinds := f.q.complete(t, nodeapi.TaskResult{}); !slices.Equal(kinds, []string{nodeapi.KindTeardownVerify}) {
		t.Fatalf("verify tasks: %v", kinds)
	}
	f.drive(t)
	got = f.get(t, inst.ID)
	if got.Status != instances.StatusDecommissioned {
		t.Fatalf("decommissioned: %+v", got)
	}
	if _, err := f.db.Queries().GetServiceAccount(f.ctx, got.ServiceAccountID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("instance identity survives: %v", err)
	}
	// Idempotent.
	_, again, err := f.svc.Decommission(f.ctx, f.g, f.project.ID, inst.ID)
	if err != nil || again.ID != dec.ID {
		t.Fatalf("repeat decommission: %v %+v", err, again)
	}
	want := []string{instances.EventRequested, instances.EventDeploying, instances.EventRunning,
		instances.EventUpgradeRequested, instances.EventUpgraded,
		instances.EventUpgradeRequested, instances.EventRolledBack,
		instances.EventRollbackRequested, instances.EventRolledBack,
		instances.EventDecommissionRequested, instances.EventDecommissioned}
	if got := f.eventTypes(t, inst.ID); !slices.Equal(got, want) {
		t.Fatalf("timeline:\n got %v\nwant %v", got, want)
	}
	// The version is free to retire now.
	if _, err := f.cat.TransitionVersion(f.ctx, f.g, "echo", "1.0.0", "retire", "t"); err != nil {
		t.Fatal(err)
	}
}

func TestRefusals(t *testing.T) {
	f := newFixture(t, store.SQLite)
	base := instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: "x"}
	with := func(mod func(*instances.CreateInput)) instances.CreateInput {
		in := base
		mod(&in)
		return in
	}
	two, five := 2, 5
	cases := []struct {
		name        string
		in          instances.CreateInput
		field, code string
		setup       func()
	}{
		{"missing slug", with(func(in *instances.CreateInput) { in.AppSlug = "" }), "/app_slug", instances.CodeRequired, nil},
		{"unknown app", with(func(in *instances.CreateInput) { in.AppSlug = "nope" }), "/app_slug", instances.CodeNotFound, nil},
		{"unknown version", with(func(in *instances.CreateInput) { in.Version = "9.9.9" }), "/version", instances.CodeNotFound, nil},
		{"foreign allocation", with(func(in *instances.CreateInput) { in.TargetAllocationID = "alloc-other" }), "/target_allocation_id", instances.CodeNotFound, nil},
		{"too many gpus", with(func(in *instances.CreateInput) { in.Resources.GPUCount = &five }), "/resources/gpu_count", catalog.CodeOutOfRange, nil},
		{"bad mode", with(func(in *instances.CreateInput) { in.OperatingMode = "platform_managed" }), "/operating_mode", catalog.CodeNotSupported, nil},
		{"gpus do not fit", with(func(in *instances.CreateInput) { in.Resources.GPUCount = &two }), "", "", func() {
			f.allocs.list[0].GPUUUIDs = []string{"GPU-a"}
		}},
	}
	for _, c := range cases {
		if c.setup != nil {
			c.setup()
			c.field, c.code = "/target_allocation_id", instances.CodeNoAllocation
		}
		_, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, c.in)
		if err == nil {
			t.Fatalf("%s: accepted", c.name)
		}
		if field, code := fieldCode(t, err); field != c.field || code != c.code {
			t.Fatalf("%s: %s %s (%v)", c.name, field, code, err)
		}
	}
	f.allocs.list[0].GPUUUIDs = []string{"GPU-a", "GPU-b"}

	// Incompatible target: wrong accelerator, inactive allocation.
	f.allocs.list[0].Inventory.GPUs[0].Vendor, f.allocs.list[0].Inventory.GPUs[1].Vendor = "amd", "amd"
	_, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, with(func(in *instances.CreateInput) { in.TargetAllocationID = f.allocID }))
	if field, code := fieldCode(t, err); field != "/target_allocation_id" || code != instances.CodeIncompatibleTarget {
		t.Fatalf("accelerator: %s %s", field, code)
	}
	f.allocs.list[0].Inventory.GPUs[0].Vendor, f.allocs.list[0].Inventory.GPUs[1].Vendor = "nvidia", "nvidia"
	f.allocs.list[0].State = "releasing"
	_, _, err = f.svc.Create(f.ctx, f.g, f.project.ID, with(func(in *instances.CreateInput) { in.TargetAllocationID = f.allocID }))
	if field, code := fieldCode(t, err); field != "/target_allocation_id" || code != instances.CodeAllocationNotActive {
		t.Fatalf("inactive: %s %s", field, code)
	}
	f.allocs.list[0].State = "active"

	// Not entitled; deprecated version; revoked artifact.
	off := false
	_, err = f.cat.PutEntitlement(f.ctx, f.g, f.project.ID, "echo", catalog.EntitlementInput{Enabled: &off})
	must(t, err)
	if field, code := fieldCode(t, mustFail(f.svc.Create(f.ctx, f.g, f.project.ID, base))); field != "/app_slug" || code != instances.CodeNotEntitled {
		t.Fatalf("entitlement: %s %s", field, code)
	}
	on := true
	_, err = f.cat.PutEntitlement(f.ctx, f.g, f.project.ID, "echo", catalog.EntitlementInput{Enabled: &on})
	must(t, err)
	_, err = f.cat.TransitionVersion(f.ctx, f.g, "echo", "3.0.0", "deprecate", "t")
	must(t, err)
	if field, code := fieldCode(t, mustFail(f.svc.Create(f.ctx, f.g, f.project.ID, with(func(in *instances.CreateInput) { in.Version = "3.0.0" })))); field != "/version" || code != instances.CodeVersionNotLaunchable {
		t.Fatalf("deprecated: %s %s", field, code)
	}
	_, err = f.db.Queries().AppArtifactsOfVersion(f.ctx, "echo", "2.0.0")
	must(t, err)
	revoke(t, f, "2.0.0")
	if field, code := fieldCode(t, mustFail(f.svc.Create(f.ctx, f.g, f.project.ID, with(func(in *instances.CreateInput) { in.Version = "2.0.0" })))); field != "/version" || code != instances.CodeArtifactRevoked {
		t.Fatalf("revoked: %s %s", field, code)
	}
}

func mustFail(_ instances.AppInstance, _ instances.InstanceOperation, err error) error { return err }

func revoke(t *testing.T, f *fixture, version string) {
	t.Helper()
	changeArtifacts(t, f, version, func(a *artifacts.AppArtifact) { a.RevokedAt, a.RevokeReason = time.Now(), "test" })
}

// changeArtifacts applies change to every artifact of echo@version and
// stores it, as the artifacts domain's transitions would.
func changeArtifacts(t *testing.T, f *fixture, version string, change func(*artifacts.AppArtifact)) {
	t.Helper()
	arts, err := f.db.Queries().AppArtifactsOfVersion(f.ctx, "echo", version)
	must(t, err)
	for _, a := range arts {
		prev := a
		change(&a)
		a.UpdatedAt = time.Now()
		must(t, f.db.Queries().UpdateAppArtifactState(f.ctx, a, prev.LifecycleState, prev.TrustState, prev.Revoked()))
	}
}

// A driver that dies between steps loses nothing: a new one (another
// replica, or the restarted server) picks the operation up from its phase.
// Two drivers never take the same operation at once.
func TestDriverResumesAndLeases(t *testing.T) {
	f := newFixture(t, store.SQLite)
	inst, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: "x"})
	must(t, err)
	ops, err := f.db.Queries().OpenInstanceOperations(f.ctx, time.Now(), 10)
	must(t, err)
	ok, err := f.db.Queries().LeaseInstanceOperation(f.ctx, ops[0].ID, "replica-a", time.Now(), time.Now().Add(time.Minute))
	if err != nil || !ok {
		t.Fatal("lease", err)
	}
	// Replica b sees nothing to do while a holds the lease.
	must(t, f.svc.Drive(f.ctx, "replica-b"))
	if len(f.q.pending()) != 0 {
		t.Fatal("replica b drove a leased operation")
	}
	// a "dies"; its lease lapses; b resumes.
	_, err = f.db.Queries().LeaseInstanceOperation(f.ctx, ops[0].ID, "replica-a", time.Now(), time.Now().Add(-time.Second))
	must(t, err)
	must(t, f.svc.Drive(f.ctx, "replica-b"))
	if len(f.q.pending()) != 1 {
		t.Fatalf("tasks after resume: %d", len(f.q.pending()))
	}
	f.q.complete(t, nodeapi.TaskResult{})
	must(t, f.svc.Drive(f.ctx, "replica-c"))
	if got := f.get(t, inst.ID); got.Status != instances.StatusRunning {
		t.Fatalf("after resume: %s", got.Status)
	}
}

// Node loss fails running instances with node_lost; the node's return
// redeploys them; a decommission waits for a verifiable node.
func TestNodeLossAndReturn(t *testing.T) {
	f := newFixture(t, store.SQLite)
	inst, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: "x"})
	must(t, err)
	f.drive(t)
	f.q.complete(t, nodeapi.TaskResult{})
	f.drive(t)
	must(t, f.db.Mutate(f.ctx, func(tx *store.Tx) error {
		if err := f.svc.FailNode(f.ctx, tx, "node-1"); err != nil {
			return err
		}
		return tx.Audit(store.AuditEvent{Action: "node.down", ResourceType: "node", ResourceID: "node-1"}, nil, nil)
	}))
	if got := f.get(t, inst.ID); got.Status != instances.StatusFailed || got.ReasonCode != instances.ReasonNodeLost {
		t.Fatalf("node down: %+v", got)
	}
	must(t, f.db.Mutate(f.ctx, func(tx *store.Tx) error {
		if err := f.svc.RecoverNode(f.ctx, tx, "node-1", nil); err != nil {
			return err
		}
		return tx.Audit(store.AuditEvent{Action: "node.up", ResourceType: "node", ResourceID: "node-1"}, nil, nil)
	}))
	for range 3 {
		f.drive(t)
		f.q.complete(t, nodeapi.TaskResult{})
	}
	f.drive(t)
	if got := f.get(t, inst.ID); got.Status != instances.StatusRunning {
		t.Fatalf("after node return: %+v", got)
	}
	// Releasing the allocation decommissions the instance.
	must(t, f.db.Mutate(f.ctx, func(tx *store.Tx) error {
		if err := f.svc.AllocationReleased(f.ctx, tx, f.allocID); err != nil {
			return err
		}
		return tx.Audit(store.AuditEvent{Action: "allocation.release", ResourceType: "allocation", ResourceID: f.allocID}, nil, nil)
	}))
	if got := f.get(t, inst.ID); got.Status != instances.StatusDecommissioning {
		t.Fatalf("after release: %+v", got)
	}
	// Until the node verifies, it stays decommissioning.
	f.drive(t)
	f.drive(t)
	if got := f.get(t, inst.ID); got.Status != instances.StatusDecommissioning {
		t.Fatalf("claimed decommissioned without proof: %+v", got)
	}
	for range 3 {
		f.q.complete(t, nodeapi.TaskResult{})
		f.drive(t)
	}
	if got := f.get(t, inst.ID); got.Status != instances.StatusDecommissioned {
		t.Fatalf("after verify: %+v", got)
	}
}

// A node that reports success while running another image than the one
// pinned has failed the step: create fails with digest_mismatch, and an
// upgrade whose node runs the wrong image reverts to the version before.
func TestNodeReportedDigestIsChecked(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) { testNodeReportedDigestIsChecked(t, d) })
}

func testNodeReportedDigestIsChecked(t *testing.T, d store.Dialect) {
	f := newFixture(t, d)
	other := "sha256:" + strings.Repeat("e", 64)
	runs := func(digests ...string) nodeapi.TaskResult {
		out, _ := json.Marshal(nodeapi.RunOutput{ContainerIDs: []string{"c-x"}, Ports: []nodeapi.PortMapping{{Container: 8080, Host: 31000}},
			HostAddress: "10.0.0.7", ImageDigest: digestV1, ImageDigests: digests})
		return nodeapi.TaskResult{State: nodeapi.ResultSucceeded, Output: out}
	}
	for name, res := range map[string]nodeapi.TaskResult{"another digest": runs(other), "no digest": runs(), "one too many": runs(digestV1, other)} {
		inst, op, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: name})
		must(t, err)
		f.drive(t)
		f.q.complete(t, res)
		f.drive(t)
		got := f.get(t, inst.ID)
		if got.Status != instances.StatusFailed || got.ReasonCode != nodeapi.ReasonDigestMismatch || !strings.Contains(got.ReasonMessage, digestV1) {
			t.Fatalf("%s: %s %s %q", name, got.Status, got.ReasonCode, got.ReasonMessage)
		}
		if o, _ := f.svc.Operation(f.ctx, f.g, f.project.ID, op.ID); o.State != instances.OpFailed || o.ReasonCode != nodeapi.ReasonDigestMismatch {
			t.Fatalf("%s: op %+v", name, o)
		}
	}

	// The right digest runs; an upgrade whose node runs another image reverts.
	inst, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: "good"})
	must(t, err)
	f.drive(t)
	f.q.complete(t, runs(digestV1))
	f.drive(t)
	if got := f.get(t, inst.ID); got.Status != instances.StatusRunning {
		t.Fatalf("right digest: %s %s", got.Status, got.ReasonMessage)
	}
	_, up, err := f.svc.Upgrade(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: "2.0.0"})
	must(t, err)
	f.drive(t)                            // remove 1.0.0
	f.q.complete(t, nodeapi.TaskResult{}) // removed
	f.drive(t)                            // run 2.0.0
	f.q.complete(t, runs(other))          // …but the node runs another image
	for range 3 {
		f.drive(t)
		f.q.complete(t, nodeapi.TaskResult{})
	}
	f.drive(t)
	got := f.get(t, inst.ID)
	if got.Status != instances.StatusRunning || got.Version != "1.0.0" || got.ReasonCode != instances.ReasonUpgradeReverted {
		t.Fatalf("after a wrong image on upgrade: %s %s %s", got.Status, got.Version, got.ReasonCode)
	}
	if o, _ := f.svc.Operation(f.ctx, f.g, f.project.ID, up.ID); o.State != instances.OpFailed || o.ReasonCode != nodeapi.ReasonDigestMismatch {
		t.Fatalf("upgrade op: %+v", o)
	}
}

// registerVLLM adds, verifies and publishes the vLLM example as version,
// its manifest text changed by the old/new pairs of edits.
func (f *fixture) registerVLLM(t *testing.T, version string, edits ...string) {
	t.Helper()
	data, err := os.ReadFile("../../examples/manifests/vllm-openai-compose.yaml")
	must(t, err)
	m := strings.NewReplacer(append([]string{"version: 0.6.3", "version: " + version}, edits...)...).Replace(string(data))
	_, err = f.cat.RegisterManifest(f.ctx, f.g, []byte(m), catalog.SyntaxYAML)
	must(t, err)
	v, err := f.db.Queries().GetAppVersion(f.ctx, "vllm-openai", version)
	must(t, err)
	var mv manifest.Version
	must(t, json.Unmarshal(v.Manifest, &mv))
	now := time.Now()
	for _, a := range mv.Artifacts {
		must(t, f.db.Queries().InsertAppArtifact(f.ctx, artifacts.AppArtifact{ID: iam.NewID(), OrgID: f.project.OrgID, ProjectID: f.project.ID,
			AppSlug: "vllm-openai", AppVersion: version, ArtifactName: a.Name, ArtifactKind: "oci", SourceType: "oci_registry", Repository: a.Repository,
			Digest: a.Digest, LifecycleState: "active", TrustState: "verified", CreatedBy: "t", CreatedAt: now, UpdatedAt: now}))
	}
	_, err = f.cat.TransitionVersion(f.ctx, f.g, "vllm-openai", version, "publish", "test")
	must(t, err)
	on := true
	_, err = f.cat.PutEntitlement(f.ctx, f.g, f.project.ID, "vllm-openai", catalog.EntitlementInput{Enabled: &on})
	must(t, err)
}

// Launch values the renderer refuses are refused when asked for — create,
// preview and upgrade answer render_failed at once and record nothing —
// rather than after an operation began: it would render the same way on
// every pass.
func TestRenderRefusalIsAnsweredAtTheRequest(t *testing.T) {
	f := newFixture(t, store.SQLite)
	f.registerVLLM(t, "0.6.3")
	// A parameter default the schema accepts as an integer but no int holds.
	f.registerVLLM(t, "0.6.4", "maximum: 131072", "maximum: 1e30", "default: 8192", "default: 1e20")
	in := instances.CreateInput{AppSlug: "vllm-openai", Version: "0.6.4", DisplayName: "v", Parameters: json.RawMessage(`{"model": "a/b"}`)}
	_, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, in)
	if e, ok := errdefs.As(err); !ok || e.Code != instances.ReasonRenderFailed || !strings.Contains(e.Message, "vllm_openai parameters") {
		t.Fatalf("create with values that do not render: %v", err)
	}
	if list, _, err := f.svc.List(f.ctx, f.g, f.project.ID, "", store.Page{Limit: 10}); err != nil || len(list) != 0 {
		t.Fatalf("a refused create left %d instance(s) (%v)", len(list), err)
	}
	if err := f.svc.LaunchRefusal(f.ctx, f.g, f.project.ID, "vllm-openai", "0.6.4", catalog.LaunchRequest{Parameters: in.Parameters}); err == nil {
		t.Fatal("preview passed what create refuses")
	}
	in.Version = "0.6.3"
	inst, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, in)
	must(t, err)
	f.drive(t)
	f.q.complete(t, nodeapi.TaskResult{})
	f.drive(t)
	_, _, err = f.svc.Upgrade(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: "0.6.4"})
	if e, ok := errdefs.As(err); !ok || e.Code != instances.ReasonRenderFailed {
		t.Fatalf("upgrade to a version that does not render: %v", err)
	}
	if got := f.get(t, inst.ID); got.Status != instances.StatusRunning || got.Version != "0.6.3" {
		t.Fatalf("after a refused upgrade: %s %s", got.Status, got.Version)
	}
}

// An upgrade whose new version cannot be deployed once its turn comes (an
// artifact revoked since the request) reverts to the version before, as a
// new version that does not become ready does: the previous workload was
// removed already, and failing left nothing running.
func TestUpgradeRefusedAtDeployReverts(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		inst, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: "x"})
		must(t, err)
		f.drive(t)
		f.q.complete(t, nodeapi.TaskResult{})
		f.drive(t)
		_, up, err := f.svc.Upgrade(f.ctx, f.g, f.project.ID, inst.ID, instances.VersionInput{TargetVersion: "2.0.0"})
		must(t, err)
		revoke(t, f, "2.0.0")
		for range 4 {
			f.drive(t)
			f.q.complete(t, nodeapi.TaskResult{})
		}
		f.drive(t)
		got := f.get(t, inst.ID)
		if got.Status != instances.StatusRunning || got.Version != "1.0.0" || got.Digest != digestV1 || got.ReasonCode != instances.ReasonUpgradeReverted {
			t.Fatalf("after a refused upgrade: %s %s %s", got.Status, got.Version, got.ReasonCode)
		}
		if o, _ := f.svc.Operation(f.ctx, f.g, f.project.ID, up.ID); o.State != instances.OpFailed || o.ReasonCode != instances.ReasonArtifactRevoked {
			t.Fatalf("upgrade op: %+v", o)
		}
	})
}
