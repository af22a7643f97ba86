// Command cluster-app is the reference cluster app: the Slurm pattern of
// one controller and the workers an operator adds to it, with CPU
// stand-ins for both. One image runs in either role. Launched, it is the
// controller (the instance's own workload); added as a member
// (POST …/app-instances/{id}/members {"role": "worker"}), on any node, it
// is a worker, told so by GPUAAS_MEMBER_ROLE and GPUAAS_MEMBER_NAME.
//
// The controller keeps the cluster's roster the way a scheduler's
// controller keeps its nodes: it follows its members with the instance's
// own identity (GET …/members) and reports each worker's comings and
// goings back to the platform as runtime events (member_added,
// member_failed, member_removed), with a heartbeat. The platform gives the
// members no network path to the controller (an instance's ports are
// host-local to its node), so the roster comes through the platform's
// member registry rather than from the workers themselves. GET / shows it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/gpuaas/gpuaas/client"
)

// worker is one worker in the controller's roster.
type worker struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	NodeID string `json:"node_id"`
	Status string `json:"status"` // running | failed | removed (the platform's word)
	Reason string `json:"reason,omitempty"`
	Since  string `json:"since"`
}

type controller struct {
	api                  *client.Client
	project, instance    string
	mu                   sync.Mutex
	roster               map[string]worker // by member id
	lastErr              string
	pollEvery, beatEvery time.Duration
}

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	role, name := os.Getenv("GPUAAS_MEMBER_ROLE"), os.Getenv("GPUAAS_MEMBER_NAME")
	if role == "" {
		role, name = "controller", "controller"
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	var c *controller
	if role == "controller" {
		var err error
		if c, err = newController(); err != nil {
			log.Fatalf("controller: %v", err)
		}
		go c.run(ctx)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		out := map[string]any{"role": role, "name": name, "instance": os.Getenv("GPUAAS_APP_INSTANCE_ID"), "version": os.Getenv("GPUAAS_APP_VERSION")}
		if c != nil {
			out["workers"], out["last_error"] = c.snapshot()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	srv := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	log.Printf("cluster-app %s %s listening on %s", role, name, port)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	log.Printf("cluster-app %s %s stopped", role, name)
}

// newController signs in with the identity the platform mounted.
func newController() (*controller, error) {
	base, keyPath := os.Getenv("GPUAAS_API_BASE_URL"), os.Getenv("GPUAAS_IDENTITY_FILE")
	if base == "" || keyPath == "" {
		return nil, errors.New("GPUAAS_API_BASE_URL and GPUAAS_IDENTITY_FILE are not set: run it as an instance of the platform")
	}
	key, err := client.ReadKeyFile(keyPath)
	if err != nil {
		return nil, err
	}
	tokens := client.NewTokenSource(client.New(base, ""), key)
	api := client.New(base, "")
	api.UserAgent = "gpuaas-cluster-app"
	api.HTTP.Transport = tokens.Transport(nil)
	return &controller{api: api, project: os.Getenv("GPUAAS_PROJECT_ID"), instance: os.Getenv("GPUAAS_APP_INSTANCE_ID"),
		roster: map[string]worker{}, pollEvery: time.Second, beatEvery: 10 * time.Second}, nil
}

// run follows the members until ctx ends.
func (c *controller) run(ctx context.Context) {
	poll, beat := time.NewTicker(c.pollEvery), time.NewTicker(c.beatEvery)
	defer poll.Stop()
	defer beat.Stop()
	for {
		if err := c.sync(ctx); err != nil && ctx.Err() == nil {
			c.mu.Lock()
			c.lastErr = err.Error()
			c.mu.Unlock()
			log.Printf("roster: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			c.report(ctx, client.RuntimeEvent{ID: fmt.Sprintf("heartbeat-%d", time.Now().UnixNano()), Type: "heartbeat", Health: "healthy"})
		case <-poll.C:
		}
	}
}

// sync reads the members and reports each worker whose state changed: a
// worker running for the first time (or again) was added, one that failed
// failed, one that is gone was removed.
func (c *controller) sync(ctx context.Context) error {
	page, err := c.api.ListAppInstanceMembers(ctx, c.project, c.instance, client.CatalogListOptions{Limit: 500})
	if err != nil {
		return err
	}
	var events []client.RuntimeEvent
	c.mu.Lock()
	for _, m := range page.Items {
		if !m.Added || m.Status == "deploying" {
			continue
		}
		prev, known := c.roster[m.ID]
		if known && prev.Status == m.Status {
			continue
		}
		typ := map[string]string{"running": "member_added", "failed": "member_failed", "removed": "member_removed"}[m.Status]
		if typ == "" || (!known && m.Status == "removed") {
			continue
		}
		c.roster[m.ID] = worker{Name: m.Name, Role: m.Role, NodeID: m.NodeID, Status: m.Status, Reason: m.ReasonCode, Since: m.UpdatedAt}
		events = append(events, client.RuntimeEvent{
			// The same transition gets the same id: a report retried after
			// a lost answer is a duplicate, not a second event.
			ID: "roster-" + m.ID + "-" + m.Status + "-" + m.UpdatedAt, Type: typ, Member: m.Name, Role: m.Role,
			Reason: m.ReasonCode, Message: fmt.Sprintf("%s is %s on node %s", m.Name, m.Status, m.NodeID)})
	}
	c.lastErr = ""
	c.mu.Unlock()
	if len(events) > 0 {
		c.report(ctx, events...)
	}
	return nil
}

// report posts runtime events about the instance, retrying a few times.
func (c *controller) report(ctx context.Context, events ...client.RuntimeEvent) {
	for i := range events {
		events[i].Source = "cluster-app/controller"
	}
	for try := 1; try <= 3; try++ {
		_, err := c.api.ReportRuntimeEvents(ctx, c.project, c.instance, events)
		if err == nil {
			for _, e := range events {
				if e.Member != "" {
					log.Printf("reported %s %s", e.Type, e.Member)
				}
			}
			return
		}
		log.Printf("report %d event(s) (try %d): %v", len(events), try, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(try) * time.Second):
		}
	}
}

func (c *controller) snapshot() ([]worker, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]worker, 0, len(c.roster))
	for _, w := range c.roster {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, c.lastErr
}
