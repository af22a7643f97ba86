package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/driver/drivertest"
)

// A beat tells the control plane what runs on the node, and a workload
// missing from it is taken for gone. An agent whose engine does not answer
// cannot say, so it sends no beat at all rather than one reporting nothing
// running; once the engine answers, it beats with what really runs.
func TestNoHeartbeatWhileTheEngineCannotBeListed(t *testing.T) {
	var (
		mu    sync.Mutex
		beats []nodeapi.Heartbeat
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !strings.HasSuffix(r.URL.Path, "/heartbeat") {
			http.NotFound(w, r)
			return
		}
		var hb nodeapi.Heartbeat
		if err := json.NewDecoder(r.Body).Decode(&hb); err != nil {
			t.Errorf("heartbeat body: %v", err)
		}
		mu.Lock()
		beats = append(beats, hb)
		mu.Unlock()
		_, _ = io.WriteString(w, `{"state":"ready","heartbeat_ttl_seconds":10,"heartbeat_interval_seconds":3}`)
	}))
	defer srv.Close()
	f := &drivertest.Fake{Errs: map[string]error{"Workloads": errors.New("Cannot connect to the Docker daemon")}}
	f.Add(nodeapi.Workload{ContainerID: "c1", Name: "gpuaas-inst-1", InstanceID: "inst-1", TaskID: "t1", State: "running"})
	a := newFakeAgent(t, f, func(c *Config) { c.Server = srv.URL })
	a.id = identity{NodeID: "node-1"}
	a.tok = &tokens{api: a.api, id: &a.id, token: "tok", expiry: time.Now().Add(time.Hour)}
	ctx := context.Background()
	if err := a.heartbeat(ctx); err == nil {
		t.Fatal("a beat without the engine's workloads succeeded")
	}
	mu.Lock()
	if len(beats) != 0 {
		t.Fatalf("beat while the engine could not be listed: %+v", beats)
	}
	mu.Unlock()
	delete(f.Errs, "Workloads") // nothing else runs: the agent's loops are not started
	a.lastBeat = time.Time{}
	if err := a.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(beats) != 1 || len(beats[0].Workloads) != 1 || beats[0].Workloads[0].ContainerID != "c1" {
		t.Fatalf("beats %+v", beats)
	}
}
