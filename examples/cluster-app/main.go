// Cluster (Slurm pattern): a gpuaas cluster app in the Slurm pattern, started by
// `gpuaas init --template controller`.
//
// One image plays two roles. Launched, it is the controller: the
// instance's own workload. Added to the instance as a member (gpuaas
// instance member add ID --role worker), on any node, it is a worker, told
// so by GPUAAS_MEMBER_ROLE and GPUAAS_MEMBER_NAME.
//
// The controller keeps the cluster's roster the way a scheduler's
// controller keeps its nodes: every poll_seconds (a launch parameter) it
// lists the instance's members with the instance's own identity
// (GET …/members) and reports each worker joining, failing and going back
// to the platform as runtime events
// (member_added, member_failed, member_removed). Members have no network
// path to the controller (an instance's ports are host-local to its node),
// so the roster comes from the platform's member registry rather than from
// the workers. GET / shows it. usage.go signs in as the instance, lends the
// controller its token and sends the heartbeat.
//
// What the platform expects of an app, and where this file does it:
//   - it serves on the port its manifest declares (PORT, default 8080);
//   - GET /healthz answers 200 only while it can take work: a worker at
//     once, the controller once it has read its members (a controller that
//     cannot reach the platform never counts as running); 503 as soon as a
//     stop begins;
//   - SIGTERM stops it cleanly, exit 0; a second signal changes nothing.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// version is set at build time (-ldflags "-X main.version=1.2.0"); the
// platform also names it in GPUAAS_APP_VERSION.
var version = "dev"

// params are the launch parameters (gpuaas.yaml's runtime_profile.parameters),
// handed over by the platform in GPUAAS_PARAMETERS with defaults applied;
// members get the instance's.
type params struct {
	ClusterName string `json:"cluster_name"`
	PollSeconds int    `json:"poll_seconds"`
}

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		log.Error("stopped", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	p := params{ClusterName: "cluster", PollSeconds: 1}
	if raw := os.Getenv("GPUAAS_PARAMETERS"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			return fmt.Errorf("GPUAAS_PARAMETERS: %w", err)
		}
	}
	if v := os.Getenv("GPUAAS_APP_VERSION"); v != "" && version == "dev" {
		version = v
	}
	role, name := os.Getenv("GPUAAS_MEMBER_ROLE"), os.Getenv("GPUAAS_MEMBER_NAME")
	if role == "" {
		role, name = "controller", "controller"
	}
	log = log.With("cluster", p.ClusterName, "role", role, "name", name)

	// Signals first, so that a SIGTERM during start-up is not lost.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	ctx, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	var work sync.WaitGroup
	var c *controller
	if role == "controller" {
		var err error
		if c, err = newController(log, time.Duration(max(p.PollSeconds, 1))*time.Second); err != nil {
			return err
		}
		// The heartbeat is the controller's alone: a worker's would keep
		// the instance healthy with its controller gone.
		work.Go(func() { c.meter.Run(ctx) })
		work.Go(func() { c.run(ctx) })
	}

	var stopping atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if stopping.Load() || c != nil && !c.listed() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		out := map[string]any{"cluster": p.ClusterName, "role": role, "name": name, "instance": os.Getenv("GPUAAS_APP_INSTANCE_ID"), "version": version}
		if c != nil {
			out["workers"], out["last_error"], out["synced"] = c.snapshot()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})

	addr := ":" + envOr("PORT", "8080")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("serving", "addr", addr, "version", version)

	select {
	case err := <-errc:
		return err
	case s := <-sigs:
		log.Info("stopping", "signal", s.String())
	}
	// Further signals land in the buffered channel and change nothing.
	stopping.Store(true)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("in-flight requests cut off", "err", err)
	}
	stopWork()
	work.Wait()
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped cleanly")
	return nil
}

// worker is one worker in the controller's roster.
type worker struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	NodeID string `json:"node_id"`
	Status string `json:"status"` // running | failed | removed (the platform's word)
	Reason string `json:"reason,omitempty"`
	Since  string `json:"since"`
}

// member is one row of GET …/members: the instance's own workload
// (added: false) or a member added to it.
type member struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Added      bool   `json:"added"`
	NodeID     string `json:"node_id"`
	Role       string `json:"role"`
	Status     string `json:"status"` // deploying | running | failed | removed
	ReasonCode string `json:"reason_code"`
	UpdatedAt  string `json:"updated_at"`
}

// runtimeEvent is a runtime event about the instance as it travels: a
// CloudEvent, posted in a batch to …/runtime-events.
type runtimeEvent struct {
	SpecVersion     string     `json:"specversion"`
	ID              string     `json:"id"`
	Source          string     `json:"source"`
	Type            string     `json:"type"`
	Subject         string     `json:"subject,omitempty"`
	DataContentType string     `json:"datacontenttype,omitempty"`
	Data            *eventData `json:"data,omitempty"`
}

type eventData struct {
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Member  string `json:"member,omitempty"`
	Role    string `json:"role,omitempty"`
}

type controller struct {
	log       *slog.Logger
	meter     *usageReporter // the instance's token and heartbeat (usage.go)
	id        string         // the instance
	instance  string         // its URL: {api}/api/v1/projects/{project}/app-instances/{id}
	pollEvery time.Duration

	mu      sync.Mutex
	roster  map[string]worker // by member id
	lastErr string
	synced  bool // the members were read at least once
}

func newController(log *slog.Logger, pollEvery time.Duration) (*controller, error) {
	// The app meters nothing of its own (gpuaas.yaml: metering.kind none);
	// the reporter signs in as the instance and sends the heartbeat.
	meter, err := newUsageReporter(log, "none")
	if err != nil {
		return nil, err
	}
	if !meter.Enabled() {
		return nil, errors.New("GPUAAS_IDENTITY_FILE and GPUAAS_APP_INSTANCE_ID are not set: run the controller as an instance of the platform (GPUAAS_MEMBER_ROLE=worker runs a worker anywhere)")
	}
	return &controller{log: log, meter: meter, id: os.Getenv("GPUAAS_APP_INSTANCE_ID"), instance: strings.TrimSuffix(meter.events, "/runtime-events"),
		pollEvery: pollEvery, roster: map[string]worker{}}, nil
}

// run follows the members until ctx ends.
func (c *controller) run(ctx context.Context) {
	poll := time.NewTicker(c.pollEvery)
	defer poll.Stop()
	for {
		if err := c.sync(ctx); err != nil && ctx.Err() == nil {
			c.mu.Lock()
			c.lastErr = err.Error()
			c.mu.Unlock()
			c.log.Warn("roster not read", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		}
	}
}

// sync reads the members and reports each worker whose state changed: a
// worker running for the first time (or again) was added, one that failed
// failed, one that is gone was removed.
func (c *controller) sync(ctx context.Context) error {
	var page struct {
		Items []member `json:"items"`
	}
	if _, err := c.meter.Call(ctx, http.MethodGet, c.instance+"/members?limit=500", nil, &page); err != nil {
		return err
	}
	var events []runtimeEvent
	var changed []member
	c.mu.Lock()
	for _, m := range page.Items {
		if !m.Added || m.Status == "deploying" {
			continue // the controller itself, or a worker not up yet
		}
		prev, known := c.roster[m.ID]
		if known && prev.Status == m.Status {
			continue
		}
		typ := map[string]string{"running": "member_added", "failed": "member_failed", "removed": "member_removed"}[m.Status]
		if typ == "" || (!known && m.Status == "removed") {
			continue
		}
		changed = append(changed, m)
		events = append(events, runtimeEvent{SpecVersion: "1.0",
			// The same transition gets the same id: a report retried after
			// a lost answer is a duplicate, not a second event.
			ID: "roster-" + m.ID + "-" + m.Status + "-" + m.UpdatedAt, Source: "cluster-app/controller", Type: typ,
			Subject: c.id, DataContentType: "application/json",
			Data: &eventData{Member: m.Name, Role: m.Role, Reason: m.ReasonCode, Message: fmt.Sprintf("%s is %s on node %s", m.Name, m.Status, m.NodeID)}})
	}
	c.lastErr, c.synced = "", true
	c.mu.Unlock()
	// A change enters the roster once the platform has its event (or
	// refused it for good), so one not reported is reported at a later poll.
	if len(events) > 0 && c.report(ctx, events) {
		c.mu.Lock()
		for _, m := range changed {
			c.roster[m.ID] = worker{Name: m.Name, Role: m.Role, NodeID: m.NodeID, Status: m.Status, Reason: m.ReasonCode, Since: m.UpdatedAt}
		}
		c.mu.Unlock()
	}
	return nil
}

// reportTries is how many times report posts one batch.
const reportTries = 3

// report posts runtime events about the instance as one batch, trying
// reportTries times where trying again may help, each time no sooner than the
// platform's Retry-After (a 429 or 503); done says the platform took them
// or refused them for good (trying again would not help).
func (c *controller) report(ctx context.Context, events []runtimeEvent) (done bool) {
	for try := 1; try <= reportTries; try++ {
		retry, err := c.meter.Call(ctx, http.MethodPost, c.instance+"/runtime-events", events, nil)
		if err == nil {
			for _, e := range events {
				c.log.Info("reported", "type", e.Type, "member", e.Data.Member)
			}
			return true
		}
		c.log.Warn("runtime events not reported", "count", len(events), "try", try, "err", err)
		if !retry {
			return true
		}
		if try == reportTries {
			break // no wait after the last try: the next poll reports them
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(max(time.Duration(try)*time.Second, retryAfter(err))):
		}
	}
	return false
}

func (c *controller) listed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.synced
}

func (c *controller) snapshot() ([]worker, string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]worker, 0, len(c.roster))
	for _, w := range c.roster {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, c.lastErr, c.synced
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
