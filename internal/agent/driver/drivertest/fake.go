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
	// Images makes the fake keep the engine's images: Pull puts one on it,
	// Run and Up fail when theirs is gone (as a container create does), and
	// Housekeep removes every image no workload uses and the agent does not
	// hold (Config.Held), as if its prune grace had passed, through
	// Config.RemoveUnheld as the engine's pruner does (refusing, as the
	// engine does, an image a workload uses by then).
	Images bool
	// Unlisted are images every Compose project's services name besides
	// those its compose.up lists: ComposeImages reports them with the
	// listed ones, Up pulls them before it starts (as the engine's Up pulls
	// every service's image; AfterPull runs after each) and its container
	// uses them.
	Unlisted []nodeapi.ImagePull
	// AfterPull, when set, runs once Pull (or Up, for Unlisted) put its
	// image on the fake engine, before it goes on: a pruner pass may come
	// in between.
	AfterPull func(ref string)
	// BeforePrune, when set, runs once Housekeep decided to remove an
	// image, before it removes it: a run may take its hold in between.
	BeforePrune func(ref string)

	mu        sync.Mutex
	cfg       driver.Config
	nodeID    string
	next      int
	calls     []string
	workloads []nodeapi.Workload
	images    map[string]bool     // refs on the fake engine (with Images)
	uses      map[string][]string // container id to the refs it uses
}

var _ driver.Driver = (*Fake)(nil)

// New returns f as a driver.New.
func (f *Fake) New(cfg driver.Config) (driver.Driver, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cfg = cfg
	return f, nil
}

// HasImage reports whether ref is on the fake engine (with Images).
func (f *Fake) HasImage(ref string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.images[ref]
}

// missing returns the first of refs not on the fake engine (with Images).
func (f *Fake) missing(refs []string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range refs {
		if f.Images && !f.images[r] {
			return r
		}
	}
	return ""
}

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
	return f.pull(p), nil
}

func (f *Fake) pull(p nodeapi.ImagePull) string {
	ref := p.Repository + "@" + p.Digest
	f.mu.Lock()
	if f.Images {
		if f.images == nil {
			f.images = map[string]bool{}
		}
		f.images[ref] = true
	}
	f.mu.Unlock()
	if f.AfterPull != nil {
		f.AfterPull(ref)
	}
	return ref
}

func (f *Fake) start(o driver.Owner, name, project string, images []nodeapi.ImagePull) (nodeapi.RunOutput, error) {
	var pinned, refs []string
	for _, ip := range images {
		pinned = append(pinned, ip.Digest)
		refs = append(refs, ip.Repository+"@"+ip.Digest)
	}
	if r := f.missing(refs); r != "" {
		return nodeapi.RunOutput{}, fmt.Errorf("create container: No such image: %s", r)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	id := fmt.Sprintf("fake-%d", f.next)
	if f.uses == nil {
		f.uses = map[string][]string{}
	}
	f.uses[id] = refs
	f.workloads = append(f.workloads, nodeapi.Workload{InstanceID: o.InstanceID, TaskID: o.TaskID, ContainerID: id, Name: name,
		ComposeProject: project, State: "running"})
	out := nodeapi.RunOutput{ContainerIDs: []string{id}, HostAddress: "127.0.0.1", Ports: []nodeapi.PortMapping{}, ImageDigests: pinned}
	if f.Digests != nil {
		out.ImageDigests = slices.Clone(f.Digests)
	}
	if len(pinned) > 0 {
		out.ImageDigest = pinned[0]
	}
	return out, nil
}

func (f *Fake) Run(_ context.Context, o driver.Owner, r nodeapi.ContainerRun) (nodeapi.RunOutput, error) {
	if err := f.call("Run"); err != nil {
		return nodeapi.RunOutput{}, err
	}
	return f.start(o, r.Name, "", []nodeapi.ImagePull{r.Image})
}

// ComposeImages lists the images u lists and Unlisted.
func (f *Fake) ComposeImages(_ context.Context, u nodeapi.ComposeUp) ([]string, error) {
	if err := f.call("ComposeImages"); err != nil {
		return nil, err
	}
	var refs []string
	for _, ip := range append(slices.Clone(u.Images), f.Unlisted...) {
		refs = append(refs, ip.Repository+"@"+ip.Digest)
	}
	return refs, nil
}

func (f *Fake) Up(_ context.Context, o driver.Owner, u nodeapi.ComposeUp) (nodeapi.RunOutput, error) {
	if err := f.call("Up"); err != nil {
		return nodeapi.RunOutput{}, err
	}
	for _, ip := range f.Unlisted {
		f.pull(ip)
	}
	return f.start(o, u.Project, u.Project, append(slices.Clone(u.Images), f.Unlisted...))
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
	if err := f.call("Housekeep"); err != nil {
		return driver.Housekeeping{}, err
	}
	f.mu.Lock()
	var unused []string
	for r := range f.images {
		if !f.inUseLocked(r) {
			unused = append(unused, r)
		}
	}
	f.mu.Unlock()
	slices.Sort(unused)
	// The agent's hold calls are made without f.mu, as the hooks are, so
	// that either may call back into the fake.
	var out driver.Housekeeping
	for _, r := range unused {
		if f.cfg.Held != nil && f.cfg.Held(r) {
			continue
		}
		if f.BeforePrune != nil {
			f.BeforePrune(r)
		}
		remove := func() error {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.inUseLocked(r) {
				return fmt.Errorf("conflict: unable to remove %s: image is being used by a container", r)
			}
			delete(f.images, r)
			return nil
		}
		var held bool
		var err error
		if f.cfg.RemoveUnheld != nil {
			held, err = f.cfg.RemoveUnheld(r, remove)
		} else {
			err = remove()
		}
		if !held && err == nil {
			out.PrunedImages = append(out.PrunedImages, r)
		}
	}
	return out, nil
}

func (f *Fake) inUseLocked(ref string) bool {
	for _, w := range f.workloads {
		if slices.Contains(f.uses[w.ContainerID], ref) {
			return true
		}
	}
	return false
}

func (f *Fake) Close() error { return f.call("Close") }
