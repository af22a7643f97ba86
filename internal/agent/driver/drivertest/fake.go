// Package drivertest has an in-memory driver.Driver for unit tests of the
// agent's task handling: no engine needed.
package drivertest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
)

// Fake keeps workloads in memory. Set its fields before the agent uses it.
type Fake struct {
	// Errs makes a call fail: the method name ("Ping", "Run", "Remove", …)
	// to the error it returns.
	Errs map[string]error
	// Digests, when set, are what Run and Up report the engine runs
	// (default: the digests the task pinned).
	Digests []string
	// Remains are resources Verify reports for an instance on top of its
	// workloads (something removal left behind).
	Remains map[string][]string
	// Logs are the lines Inspect returns.
	Logs []string

	mu        sync.Mutex
	nodeID    string
	next      int
	calls     []string
	workloads []nodeapi.Workload
}

var _ driver.Driver = (*Fake)(nil)

// New returns f as a driver.New.
func (f *Fake) New(driver.Config) (driver.Driver, error) { return f, nil }

// Calls are the methods called so far, in order.
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Workloads lists what runs.
func (f *Fake) Workloads(context.Context) ([]nodeapi.Workload, error) {
	if err := f.call("Workloads"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.workloads), nil
}

// Add puts a labelled workload on the fake engine (as if started earlier).
func (f *Fake) Add(w nodeapi.Workload) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workloads = append(f.workloads, w)
}

func (f *Fake) call(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	return f.Errs[name]
}

func (f *Fake) Ping(context.Context) error { return f.call("Ping") }

func (f *Fake) Engine(context.Context) (driver.Engine, error) {
	return driver.Engine{Version: "fake", APIVersion: "1.0"}, f.call("Engine")
}

func (f *Fake) Pull(_ context.Context, p nodeapi.ImagePull) (string, error) {
	if err := f.call("Pull"); err != nil {
		return "", err
	}
	return p.Repository + "@" + p.Digest, nil
}

func (f *Fake) start(o driver.Owner, name, project string, pinned []string) nodeapi.RunOutput {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	id := fmt.Sprintf("fake-%d", f.next)
	f.workloads = append(f.workloads, nodeapi.Workload{InstanceID: o.InstanceID, TaskID: o.TaskID, ContainerID: id, Name: name,
		ComposeProject: project, State: "running"})
	out := nodeapi.RunOutput{ContainerIDs: []string{id}, HostAddress: "127.0.0.1", Ports: []nodeapi.PortMapping{}, ImageDigests: pinned}
	if f.Digests != nil {
		out.ImageDigests = slices.Clone(f.Digests)
	}
	if len(pinned) > 0 {
		out.ImageDigest = pinned[0]
	}
	return out
}

func (f *Fake) Run(_ context.Context, o driver.Owner, r nodeapi.ContainerRun) (nodeapi.RunOutput, error) {
	if err := f.call("Run"); err != nil {
		return nodeapi.RunOutput{}, err
	}
	return f.start(o, r.Name, "", []string{r.Image.Digest}), nil
}

func (f *Fake) Up(_ context.Context, o driver.Owner, u nodeapi.ComposeUp) (nodeapi.RunOutput, error) {
	if err := f.call("Up"); err != nil {
		return nodeapi.RunOutput{}, err
	}
	var pinned []string
	for _, ip := range u.Images {
		pinned = append(pinned, ip.Digest)
	}
	return f.start(o, u.Project, u.Project, pinned), nil
}

func matches(w nodeapi.Workload, ref nodeapi.ContainerRef) bool {
	switch {
	case ref.ContainerID != "":
		return w.ContainerID == ref.ContainerID
	case ref.Name != "":
		return w.Name == ref.Name
	default:
		return ref.InstanceID != "" && w.InstanceID == ref.InstanceID
	}
}

func (f *Fake) Stop(_ context.Context, ref nodeapi.ContainerRef) error {
	if err := f.call("Stop"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, w := range f.workloads {
		if matches(w, ref) {
			f.workloads[i].State = "exited"
		}
	}
	return nil
}

func (f *Fake) Remove(_ context.Context, ref nodeapi.ContainerRef) error {
	if err := f.call("Remove"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workloads = slices.DeleteFunc(f.workloads, func(w nodeapi.Workload) bool { return matches(w, ref) })
	return nil
}

func (f *Fake) Down(_ context.Context, project, instanceID string) error {
	if err := f.call("Down"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workloads = slices.DeleteFunc(f.workloads, func(w nodeapi.Workload) bool {
		return w.ComposeProject == project && w.InstanceID == instanceID
	})
	return nil
}

func (f *Fake) Inspect(_ context.Context, ref nodeapi.ContainerRef, tail int) ([]nodeapi.Workload, []string, error) {
	if err := f.call("Inspect"); err != nil {
		return nil, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var ws []nodeapi.Workload
	for _, w := range f.workloads {
		if matches(w, ref) {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		return nil, nil, driver.Fail(nodeapi.ReasonNotFound, "no gpuaas container matches")
	}
	logs := f.Logs
	if len(logs) > tail {
		logs = logs[len(logs)-tail:]
	}
	return ws, slices.Clone(logs), nil
}

func (f *Fake) Verify(_ context.Context, instanceID string, names []string) ([]string, error) {
	if err := f.call("Verify"); err != nil {
		return nil, err
	}
	if instanceID == "" {
		return nil, driver.Fail(nodeapi.ReasonInvalidTask, "teardown.verify needs an instance id")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	remaining := []string{}
	for _, w := range f.workloads {
		if w.InstanceID == instanceID && (names == nil || slices.Contains(names, w.Name)) {
			remaining = append(remaining, "container:"+w.ContainerID)
		}
	}
	if names != nil {
		return remaining, nil
	}
	return append(remaining, f.Remains[instanceID]...), nil
}

func (f *Fake) SetNodeID(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodeID = id
}

func (f *Fake) Housekeep(context.Context) (driver.Housekeeping, error) {
	return driver.Housekeeping{}, f.call("Housekeep")
}

func (f *Fake) Close() error { return f.call("Close") }
