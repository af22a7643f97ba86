package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
	"github.com/gpuaas/gpuaas/internal/agent/driver/drivertest"
)

// newFakeAgent is an agent over the fake driver: task handling without
// Docker and without a server (nothing here reports).
func newFakeAgent(t *testing.T, f *drivertest.Fake, mod ...func(*Config)) *Agent {
	t.Helper()
	cfg := Config{Server: "http://127.0.0.1:1", DataDir: t.TempDir(), Driver: f.New, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, m := range mod {
		m(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

func task(t *testing.T, id, kind, instanceID string, payload any) nodeapi.Task {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return nodeapi.Task{ID: id, Kind: kind, InstanceID: instanceID, Payload: b}
}

const (
	pinned  = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	running = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// A run task reports the digests the driver says the engine runs, not the
// ones the task asked for: the server compares the two.
func TestRunReportsTheDigestsTheDriverRan(t *testing.T) {
	f := &drivertest.Fake{Digests: []string{running}}
	a := newFakeAgent(t, f)
	img := nodeapi.ImagePull{Repository: "registry.test/app", Digest: pinned}
	for _, tk := range []nodeapi.Task{
		task(t, "run-1", nodeapi.KindContainerRun, "inst-1", nodeapi.ContainerRun{Name: "app", Image: img}),
		task(t, "up-1", nodeapi.KindComposeUp, "inst-2", nodeapi.ComposeUp{Project: "p", Images: []nodeapi.ImagePull{img}}),
	} {
		res := a.execute(context.Background(), tk)
		if res.State != nodeapi.ResultSucceeded {
			t.Fatalf("%s: %+v", tk.Kind, res)
		}
		var out nodeapi.RunOutput
		if err := json.Unmarshal(res.Output, &out); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out.ImageDigests, []string{running}) || out.ImageDigest != pinned || len(out.ContainerIDs) != 1 {
			t.Fatalf("%s: output %+v, want the running digest %s", tk.Kind, out, running)
		}
	}
	ws, _ := f.Workloads(context.Background())
	if len(ws) != 2 || ws[0].TaskID != "run-1" || ws[0].InstanceID != "inst-1" {
		t.Fatalf("workloads %+v: the run did not carry its task's ownership", ws)
	}
}

// A removal of the whole instance, then teardown.verify: it succeeds when
// nothing labelled remains and fails resources_remain naming what does.
func TestRemoveVerifiesTeardown(t *testing.T) {
	f := &drivertest.Fake{Remains: map[string][]string{}}
	a := newFakeAgent(t, f)
	ctx := context.Background()
	f.Add(nodeapi.Workload{InstanceID: "inst-1", TaskID: "run-1", ContainerID: "c1"})
	f.Add(nodeapi.Workload{InstanceID: "inst-1", TaskID: "run-1", ContainerID: "c2"})
	f.Add(nodeapi.Workload{InstanceID: "inst-other", TaskID: "run-2", ContainerID: "c3"})

	verify := func(id string) nodeapi.TaskResult {
		return a.execute(ctx, task(t, id, nodeapi.KindTeardownVerify, "inst-1", nodeapi.TeardownVerify{}))
	}
	if res := verify("verify-0"); res.State != nodeapi.ResultFailed || res.ReasonCode != nodeapi.ReasonResourcesRemain ||
		!strings.Contains(res.Message, "container:c1") || !strings.Contains(res.Message, "container:c2") {
		t.Fatalf("verify before removal: %+v", res)
	}
	if res := a.execute(ctx, task(t, "rm-1", nodeapi.KindContainerRemove, "inst-1", nodeapi.ContainerRef{})); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("remove: %+v", res)
	}
	if res := verify("verify-1"); res.State != nodeapi.ResultSucceeded {
		t.Fatalf("verify after removal: %+v", res)
	}
	if ws, _ := f.Workloads(ctx); len(ws) != 1 || ws[0].InstanceID != "inst-other" {
		t.Fatalf("the removal of inst-1 touched another instance: %+v", ws)
	}
	// Something labelled that the removal left behind fails the proof.
	f.Remains["inst-1"] = []string{"volume:inst-1_data"}
	if res := verify("verify-2"); res.State != nodeapi.ResultFailed || res.ReasonCode != nodeapi.ReasonResourcesRemain ||
		!strings.Contains(res.Message, "volume:inst-1_data") {
		t.Fatalf("verify with a volume left: %+v", res)
	}
}

// A failing driver yields a failed result with its reason; an error with
// no reason is internal_error; an engine that does not answer fails every
// task engine_unavailable before anything runs.
func TestFailingDriverFailsTheTask(t *testing.T) {
	var tail []string
	for i := range 80 {
		tail = append(tail, fmt.Sprint("line ", i))
	}
	f := &drivertest.Fake{Errs: map[string]error{
		"Run":    &driver.Failure{Reason: nodeapi.ReasonContainerExited, Message: "container exited with code 3", LogTail: tail},
		"Remove": errors.New("the engine lost its disk"),
	}}
	a := newFakeAgent(t, f)
	ctx := context.Background()
	img := nodeapi.ImagePull{Repository: "registry.test/app", Digest: pinned}

	res := a.execute(ctx, task(t, "run-1", nodeapi.KindContainerRun, "inst-1", nodeapi.ContainerRun{Name: "app", Image: img}))
	if res.State != nodeapi.ResultFailed || res.ReasonCode != nodeapi.ReasonContainerExited || res.Message != "container exited with code 3" {
		t.Fatalf("run: %+v", res)
	}
	if len(res.LogTail) != 50 || res.LogTail[49] != "line 79" {
		t.Fatalf("run log tail: %d lines, last %q (want the last 50)", len(res.LogTail), res.LogTail[len(res.LogTail)-1])
	}
	res = a.execute(ctx, task(t, "rm-1", nodeapi.KindContainerRemove, "inst-1", nodeapi.ContainerRef{}))
	if res.State != nodeapi.ResultFailed || res.ReasonCode != nodeapi.ReasonInternal || !strings.Contains(res.Message, "lost its disk") {
		t.Fatalf("remove: %+v", res)
	}
	for _, tk := range []nodeapi.Task{
		{ID: "bad-1", Kind: nodeapi.KindContainerRun, InstanceID: "inst-1", Payload: []byte(`{"name":`)},
		{ID: "bad-2", Kind: "container.teleport", InstanceID: "inst-1", Payload: []byte(`{}`)},
	} {
		if res := a.execute(ctx, tk); res.State != nodeapi.ResultFailed || res.ReasonCode != nodeapi.ReasonInvalidTask {
			t.Fatalf("%s: %+v", tk.Kind, res)
		}
	}

	f.Errs["Ping"] = errors.New("connection refused")
	before := len(f.Calls())
	res = a.execute(ctx, task(t, "run-2", nodeapi.KindContainerRun, "inst-1", nodeapi.ContainerRun{Name: "app", Image: img}))
	if res.State != nodeapi.ResultFailed || res.ReasonCode != nodeapi.ReasonEngineUnavailable || !strings.Contains(res.Message, "connection refused") {
		t.Fatalf("run on a dead engine: %+v", res)
	}
	if calls := f.Calls()[before:]; !slices.Equal(calls, []string{"Ping"}) {
		t.Fatalf("calls on a dead engine %v, want only Ping", calls)
	}
}

// A task runs once: it is recorded as started before it runs, its result
// replaces that record, and a redelivery re-reports the stored result.
func TestTaskRunsOnceAndIsRecorded(t *testing.T) {
	f := &drivertest.Fake{}
	a := newFakeAgent(t, f)
	ctx := context.Background()
	tk := task(t, "run-1", nodeapi.KindContainerRun, "inst-1", nodeapi.ContainerRun{Name: "app", Image: nodeapi.ImagePull{Repository: "r/app", Digest: pinned}})
	res, done, ok := a.runOnce(ctx, tk)
	if !ok || done || res.State != nodeapi.ResultSucceeded {
		t.Fatalf("first run: %+v done=%v ok=%v", res, done, ok)
	}
	if a.started.Has(tk.ID) || !a.results.Has(tk.ID) {
		t.Fatalf("records: started=%v result=%v, want only the result", a.started.Has(tk.ID), a.results.Has(tk.ID))
	}
	again, done, ok := a.runOnce(ctx, tk)
	if !ok || !done || again.State != res.State || string(again.Output) != string(res.Output) {
		t.Fatalf("redelivery: %+v done=%v ok=%v", again, done, ok)
	}
	if n := strings.Count(strings.Join(f.Calls(), " "), "Run"); n != 1 {
		t.Fatalf("the driver ran the task %d times", n)
	}
	if ws, _ := f.Workloads(ctx); len(ws) != 1 || !a.known(ws[0]) {
		t.Fatalf("the task's workload is not known to the agent: %+v", ws)
	}
}

// A task whose "started" record cannot be written does not run (its
// workloads would be taken for orphans) and fails with the reason.
func TestTaskFailsWhenItCannotBeRecordedAsStarted(t *testing.T) {
	f := &drivertest.Fake{}
	a := newFakeAgent(t, f)
	// A file where the started dir was: no write succeeds, even as root.
	if err := os.RemoveAll(a.started.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.started.dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tk := task(t, "run-1", nodeapi.KindContainerRun, "inst-1", nodeapi.ContainerRun{Name: "app", Image: nodeapi.ImagePull{Repository: "r/app", Digest: pinned}})
	res, done, ok := a.runOnce(context.Background(), tk)
	if !ok || done || res.State != nodeapi.ResultFailed || res.ReasonCode != nodeapi.ReasonInternal || !strings.Contains(res.Message, "started") {
		t.Fatalf("result %+v done=%v ok=%v", res, done, ok)
	}
	if slices.Contains(f.Calls(), "Run") {
		t.Fatalf("the driver ran a task that was not recorded: %v", f.Calls())
	}
}

// Stored task records are pruned past their age and beyond the count
// kept, newest kept first; the record of a task whose workload still runs
// stays whatever its age.
func TestOldTaskRecordsArePruned(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f := &drivertest.Fake{}
	a := newFakeAgent(t, f, func(c *Config) {
		c.ResultRetention, c.ResultsKept, c.Now = 24*time.Hour, 3, func() time.Time { return now }
	})
	put := func(r results, id string, age time.Duration) {
		t.Helper()
		if err := r.Put(id, nodeapi.TaskResult{State: nodeapi.ResultSucceeded}); err != nil {
			t.Fatal(err)
		}
		p, _ := r.path(id)
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	put(a.results, "live-old", 90*24*time.Hour) // its container still runs
	f.Add(nodeapi.Workload{InstanceID: "inst-1", TaskID: "live-old", ContainerID: "c1"})
	put(a.results, "old", 25*time.Hour)
	for i := range 5 {
		put(a.results, fmt.Sprint("recent-", i), time.Duration(i+1)*time.Minute)
	}
	put(a.started, "crashed-mid-task", 48*time.Hour)
	put(a.started, "in-flight", time.Minute)

	if err := a.pruneRecords(context.Background()); err != nil {
		t.Fatal(err)
	}
	names := func(r results) []string {
		es, _ := os.ReadDir(r.dir)
		var out []string
		for _, e := range es {
			out = append(out, strings.TrimSuffix(e.Name(), filepath.Ext(e.Name())))
		}
		return out
	}
	if got, want := names(a.results), []string{"live-old", "recent-0", "recent-1", "recent-2"}; !slices.Equal(got, want) {
		t.Fatalf("results kept %v, want %v", got, want)
	}
	if got, want := names(a.started), []string{"in-flight"}; !slices.Equal(got, want) {
		t.Fatalf("started records kept %v, want %v", got, want)
	}
}

// A second agent on a data dir a running agent holds is refused with the
// dir and the holder's pid, and changes nothing; once the first stops, the
// dir can be taken.
func TestSecondAgentOnADataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	f := &drivertest.Fake{}
	first := newFakeAgent(t, f, func(c *Config) { c.DataDir = dir })
	if err := first.results.Put("task-1", nodeapi.TaskResult{State: nodeapi.ResultSucceeded}); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{Server: "http://127.0.0.1:1", DataDir: dir, Driver: f.New})
	if err == nil {
		t.Fatal("a second agent started on a held data dir")
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("the refusal does not name the dir and the holder: %v", err)
	}
	if !first.results.Has("task-1") {
		t.Fatal("the refused agent changed the holder's records")
	}
	first.Stop()
	second, err := New(Config{Server: "http://127.0.0.1:1", DataDir: dir, Driver: f.New})
	if err != nil {
		t.Fatalf("after the holder stopped: %v", err)
	}
	second.Stop()
}
