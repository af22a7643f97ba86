// Package fleet runs N real node agents (internal/agent) in process beside
// a servertest server, each on an in-memory driver (drivertest.Fake), and
// waits for them to converge on the control plane's event stream, never by
// sleeping: agent-path tests without Docker.
package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/agent"
	"github.com/gpuaas/gpuaas/internal/agent/driver/drivertest"
	"github.com/gpuaas/gpuaas/internal/agent/inventory"
	"github.com/gpuaas/gpuaas/internal/servertest"
)

// Fleet is N real node agents (internal/agent, every loop of it) run in
// process beside a test server, each on its own in-memory driver
// (drivertest.Fake) and data dir, joined with real join tokens through the
// API. Tests wait for the fleet to converge on the control plane's own
// signal, its event stream, never by sleeping: see Until.
type Fleet struct {
	T      testing.TB
	S      *servertest.Server
	Admin  *servertest.Client
	Agents []*Member

	watch *watcher
}

// Member is one agent of a fleet.
type Member struct {
	Index   int // position in Fleet.Agents
	Name    string
	NodeID  string
	DataDir string
	Driver  *drivertest.Fake
	Spec    Spec

	f     *Fleet
	mu    sync.Mutex
	agent *agent.Agent
}

// Spec is how one agent of a fleet is made.
type Spec struct {
	Name string // node name; "fleet-<index+1>" when empty
	// GPUs is how many H100s the agent's inventory reports, read from a
	// real nvidia-smi report (see H100s).
	GPUs int
	// Driver is the agent's engine (a new Fake when nil); set its failures
	// and digests before the fleet starts.
	Driver *drivertest.Fake
	// Config adjusts the agent's configuration last.
	Config func(*agent.Config)
}

// Option adjusts the Spec of agent i (0-based).
type Option func(i int, s *Spec)

// WithGPUs gives every agent n GPUs.
func WithGPUs(n int) Option { return func(_ int, s *Spec) { s.GPUs = n } }

// ForAgent adjusts the Spec of agent i only.
func ForAgent(i int, f func(*Spec)) Option {
	return func(j int, s *Spec) {
		if i == j {
			f(s)
		}
	}
}

// Start joins n agents (each with one GPU unless an option says
// otherwise) to s and starts them; they stop at cleanup. It returns once
// every agent has joined (holds its node identity), not once its node is
// ready: call WaitReady.
func Start(t testing.TB, s *servertest.Server, n int, opts ...Option) *Fleet {
	t.Helper()
	f := &Fleet{T: t, S: s, Admin: s.Admin()}
	f.watch = startWatcher(client.New(s.URL, f.Admin.Token))
	t.Cleanup(func() {
		for _, m := range f.Agents {
			m.Stop()
		}
		f.watch.stop()
	})
	for i := range n {
		spec := Spec{Name: fmt.Sprintf("fleet-%d", i+1), GPUs: 1}
		for _, o := range opts {
			o(i, &spec)
		}
		if spec.Driver == nil {
			spec.Driver = &drivertest.Fake{}
		}
		m := &Member{Index: i, Name: spec.Name, DataDir: t.TempDir(), Driver: spec.Driver, Spec: spec, f: f}
		f.Agents = append(f.Agents, m)
		jt := f.Admin.Do("POST", "/api/v1/admin/nodes/join-tokens", map[string]any{"description": "fleet " + spec.Name}).Want(t, 201).String("join_token")
		if err := m.start(jt); err != nil {
			t.Fatalf("agent %s: %v", spec.Name, err)
		}
	}
	return f
}

// start runs the agent on m's data dir (joining with joinToken when it
// holds no identity yet).
func (m *Member) start(joinToken string) error {
	gpus := H100s(m.f.T, m.Spec.GPUs, m.Name)
	cfg := agent.Config{Server: m.f.S.URL, JoinToken: joinToken, DataDir: m.DataDir, Name: m.Name, HostAddress: "127.0.0.1",
		AdvertiseAddress: m.Name + ".test", Version: "test", Driver: m.Driver.New,
		Logger: slog.New(slog.NewTextHandler(testLog{m.f.T, m.Name}, nil)),
		NVIDIA: func(context.Context) (inventory.NVIDIA, error) { return gpus, nil }}
	if m.Spec.Config != nil {
		m.Spec.Config(&cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	if err := a.Start(context.Background()); err != nil {
		a.Stop()
		return err
	}
	m.mu.Lock()
	m.agent, m.NodeID = a, a.NodeID()
	m.mu.Unlock()
	return nil
}

// Agent is the running agent (nil while stopped).
func (m *Member) Agent() *agent.Agent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.agent
}

// Stop kills the agent's loops and tasks in flight, as a dead agent
// process would; what its driver runs keeps running. Stopping a stopped
// member does nothing.
func (m *Member) Stop() {
	m.mu.Lock()
	a := m.agent
	m.agent = nil
	m.mu.Unlock()
	if a != nil {
		a.Stop()
	}
}

// Restart starts the agent again on its data dir and driver (the node
// identity it holds; no join).
func (m *Member) Restart() {
	m.f.T.Helper()
	m.Stop()
	if err := m.start(""); err != nil {
		m.f.T.Fatalf("restart agent %s: %v", m.Name, err)
	}
}

// TaskCalls are the driver calls m's tasks made, in order: the Fake's
// calls without the agent's own housekeeping (Ping before each task,
// Workloads for heartbeats, Engine for the inventory, Housekeep, Close).
func (m *Member) TaskCalls() []string {
	return slices.DeleteFunc(m.Driver.Calls(), func(c string) bool {
		switch c {
		case "Ping", "Workloads", "Engine", "Housekeep", "Close":
			return true
		}
		return false
	})
}

// H100s is an NVIDIA reading of n H100 80GB HBM3 GPUs: the real nvidia-smi
// report in internal/agent/inventory/testdata, parsed by the inventory's
// own parsers, repeated with per-host UUIDs and bus ids.
func H100s(t testing.TB, n int, host string) inventory.NVIDIA {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "inventory", "testdata", "h100-80gb-hbm3")
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	x, err := inventory.ParseSMIXML(read("nvidia-smi-q.xml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := inventory.ParseQueryCSV(read("query-gpu.csv"))
	if err != nil {
		t.Fatal(err)
	}
	one := inventory.Merge(x, c)
	out := one
	out.GPUs = slices.Grow(out.GPUs[:0:0], n)
	for i := range n {
		g := one.GPUs[0]
		g.Index, g.UUID, g.PCIBusID = i, fmt.Sprintf("GPU-%s-%d", host, i), fmt.Sprintf("00000000:%02x:00.0", i+1)
		out.GPUs = append(out.GPUs, g)
	}
	return out
}

// Until returns once cond holds. cond is checked now and again after every
// event the control plane streams (every state change of a node, an
// allocation or an instance commits one), so a wait takes no sleep and no
// polling loop; it fails when ctx ends first or the event stream fails.
// Call it from the test's goroutine (cond may use the test's clients).
func (f *Fleet) Until(ctx context.Context, what string, cond func() bool) error {
	for {
		changed, err := f.watch.next()
		if cond() {
			return nil
		}
		if err != nil {
			return fmt.Errorf("waiting for %s: the event stream ended: %w", what, err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (%d events seen)", what, ctx.Err(), f.watch.count())
		}
	}
}

// Must fails the test on err (for the Wait methods).
func (f *Fleet) Must(err error) {
	f.T.Helper()
	if err != nil {
		f.T.Fatal(err)
	}
}

// NodeState is node i's state as the API reports it.
func (f *Fleet) NodeState(i int) string {
	return f.Admin.Do("GET", "/api/v1/admin/nodes/"+f.Agents[i].NodeID, nil).Want(f.T, 200).String("state")
}

// WaitNode waits until node i is in state ("ready", "down", …).
func (f *Fleet) WaitNode(ctx context.Context, i int, state string) error {
	return f.Until(ctx, fmt.Sprintf("node %s to be %s", f.Agents[i].Name, state), func() bool { return f.NodeState(i) == state })
}

// WaitReady waits until every agent's node is ready.
func (f *Fleet) WaitReady(ctx context.Context) error {
	return f.Until(ctx, "every node to be ready", func() bool {
		for i := range f.Agents {
			if f.NodeState(i) != "ready" {
				return false
			}
		}
		return true
	})
}

// WaitInstance waits until the instance id of projectID is in status and
// returns it as the API shows it.
func (f *Fleet) WaitInstance(ctx context.Context, projectID, id, status string) (*servertest.Response, error) {
	var last *servertest.Response
	err := f.Until(ctx, "instance "+id+" to be "+status, func() bool {
		last = f.Admin.Do("GET", "/api/v1/projects/"+projectID+"/app-instances/"+id, nil).Want(f.T, 200)
		return last.String("status") == status
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w; last seen: %s", err, last.Body)
	}
	return last, err
}

// Events are the events streamed so far, oldest first.
func (f *Fleet) Events() []client.Event { return f.watch.events() }

// watcher follows the platform's event stream from the oldest retained
// event and wakes every waiter at each event.
type watcher struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	seen    []client.Event
	changed chan struct{} // closed at the next event (or the stream's end)
	err     error
}

func startWatcher(api *client.Client) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	go func() {
		defer close(w.done)
		err := api.FollowEvents(ctx, client.PlatformEventsPath, client.EventFilter{}, "", func(e client.Event) error {
			w.mu.Lock()
			w.seen = append(w.seen, e)
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
			return nil
		})
		if err == nil {
			err = errors.New("stopped")
		}
		w.mu.Lock()
		w.err = err
		close(w.changed)
		w.mu.Unlock()
	}()
	return w
}

// next is the channel closed at the next event; take it before looking.
func (w *watcher) next() (<-chan struct{}, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed, w.err
}

func (w *watcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen)
}

func (w *watcher) events() []client.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}

func (w *watcher) stop() {
	w.cancel()
	<-w.done
}

// testLog writes an agent's log lines to the test's log (shown when the
// test fails or runs with -v); agents stop before the test ends.
type testLog struct {
	t    testing.TB
	name string
}

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("agent %s: %s", l.name, bytes.TrimRight(p, "\n"))
	return len(p), nil
}
