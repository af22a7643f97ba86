package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/gpuaas/gpuaas/internal/instances/instancetest"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// percentiles reports p50 and p99 of ds (milliseconds) under prefix.
func percentiles(b *testing.B, prefix string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(p float64) float64 {
		i := int(p * float64(len(ds)-1))
		return float64(ds[i].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), prefix+"-p50-ms")
	b.ReportMetric(at(0.99), prefix+"-p99-ms")
}

// pollOp waits for an operation to end, polling every 2 ms (a tight
// client, so the figure is the platform's, not the poll interval's).
func pollOp(b *testing.B, hc *http.Client, url, token string) string {
	for {
		var op struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal(rawDo(b, hc, "GET", url, token, nil), &op); err != nil {
			b.Fatal(err)
		}
		if op.State != "in_progress" {
			return op.State
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// BenchmarkInstanceControlPlane: create → running and decommission →
// verified teardown through the real API, driver and node task queue, with
// a node that answers every task at once — the control plane's own share
// of a launch (add the engine's container start and readiness, measured by
// BenchmarkDockerRunBaseline, for the whole).
func BenchmarkInstanceControlPlane(b *testing.B) {
	storetest.EachDialect(b, func(b *testing.B, d store.Dialect) { benchInstanceControlPlane(b, d) })
}

func benchInstanceControlPlane(b *testing.B, d store.Dialect) {
	e := newInstanceEnv(b, d, "echo", map[string]v1.Image{"1.0.0": nil}, echoManifest("echo"), 1)
	e.node.serve(b, okResult)
	hc := &http.Client{}
	base := e.s.URL + e.path("")
	var create, teardown []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		body, _ := json.Marshal(map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": fmt.Sprintf("bench-%d", i)})
		var inst struct {
			ID          string `json:"id"`
			OperationID string `json:"operation_id"`
		}
		_ = json.Unmarshal(rawDo(b, hc, "POST", base+"/app-instances", e.bot.Token, body), &inst)
		if st := pollOp(b, hc, base+"/operations/"+inst.OperationID, e.bot.Token); st != "succeeded" {
			b.Fatalf("create: %s", st)
		}
		create = append(create, time.Since(start))
		start = time.Now()
		_ = json.Unmarshal(rawDo(b, hc, "POST", base+"/app-instances/"+inst.ID+"/decommission", e.bot.Token, nil), &inst)
		if st := pollOp(b, hc, base+"/operations/"+inst.OperationID, e.bot.Token); st != "succeeded" {
			b.Fatalf("decommission: %s", st)
		}
		teardown = append(teardown, time.Since(start))
	}
	b.StopTimer()
	percentiles(b, "create-running", create)
	percentiles(b, "decommission", teardown)
}

// BenchmarkDockerRunBaseline: the same test app image (cached in the
// engine) started with `docker run -d` and probed on /healthz until it
// answers, then `docker rm -f` — what a launch costs without a control
// plane.
func BenchmarkDockerRunBaseline(b *testing.B) {
	if _, err := exec.LookPath("docker"); err != nil {
		b.Skip("no docker CLI")
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		b.Skipf("no Docker engine: %s", out)
	}
	img := instancetest.Image(b, instancetest.Build(b, "1.0.0", instancetest.ModeServe))
	ref := "gpuaas-bench/testapp:1.0.0"
	loadImage(b, ref, img)
	hc := &http.Client{Timeout: time.Second}
	var runs, rms []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		out, err := exec.Command("docker", "run", "-d", "--label", "io.gpuaas.test=bench", "-p", "127.0.0.1::8080", ref).CombinedOutput()
		if err != nil {
			b.Fatalf("docker run: %v %s", err, out)
		}
		id := strings.TrimSpace(string(out))
		port, err := exec.Command("docker", "port", id, "8080/tcp").Output()
		if err != nil {
			b.Fatal(err)
		}
		addr := strings.TrimSpace(strings.Split(string(port), "\n")[0])
		for {
			r, err := hc.Get("http://" + addr + "/healthz")
			if err == nil {
				r.Body.Close()
				if r.StatusCode == 200 {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		runs = append(runs, time.Since(start))
		start = time.Now()
		if out, err := exec.Command("docker", "rm", "-f", id).CombinedOutput(); err != nil {
			b.Fatalf("docker rm: %v %s", err, out)
		}
		rms = append(rms, time.Since(start))
	}
	b.StopTimer()
	percentiles(b, "run-ready", runs)
	percentiles(b, "rm", rms)
}

// loadImage loads img into the local engine as ref (docker load).
func loadImage(b *testing.B, ref string, img v1.Image) {
	tag, err := name.NewTag(ref)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "img.tar")
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("docker", "load", "-i", path).CombinedOutput(); err != nil {
		b.Fatalf("docker load: %v %s", err, out)
	}
	b.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", ref).Run(); _ = os.Remove(path) })
}

// BenchmarkInstanceRealAgent: create → running and decommission →
// verified teardown with the real agent (a `gpuaas agent` process) and the
// real Docker engine, the image cached after the first pull — the figure to
// put beside BenchmarkDockerRunBaseline.
func BenchmarkInstanceRealAgent(b *testing.B) {
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		b.Skipf("no Docker engine: %s", out)
	}
	bin := buildGpuaas(b)
	img := instancetest.Image(b, instancetest.Build(b, "1.0.0", instancetest.ModeServe))
	s := servertest.Start(b, store.SQLite)
	e := setupInstanceEnv(b, s, "echo", map[string]v1.Image{"1.0.0": img}, echoManifest("echo"), -1)
	agentDir := filepath.Join(b.TempDir(), "agent")
	if err := os.MkdirAll(agentDir, 0o700); err != nil {
		b.Fatal(err)
	}
	nodeID := startRealAgent(b, s, e.admin, bin, agentDir).nodeID
	e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 0, "sku": "cpu.0x", "node_id": nodeID}).Want(b, 201)
	hc := &http.Client{}
	base := e.s.URL + e.path("")
	run := func(i int) (time.Duration, time.Duration) {
		start := time.Now()
		body, _ := json.Marshal(map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": fmt.Sprintf("bench-%d", i)})
		var inst struct {
			ID          string `json:"id"`
			OperationID string `json:"operation_id"`
		}
		_ = json.Unmarshal(rawDo(b, hc, "POST", base+"/app-instances", e.bot.Token, body), &inst)
		if st := pollOp(b, hc, base+"/operations/"+inst.OperationID, e.bot.Token); st != "succeeded" {
			b.Fatalf("create: %s", st)
		}
		created := time.Since(start)
		start = time.Now()
		_ = json.Unmarshal(rawDo(b, hc, "POST", base+"/app-instances/"+inst.ID+"/decommission", e.bot.Token, nil), &inst)
		if st := pollOp(b, hc, base+"/operations/"+inst.OperationID, e.bot.Token); st != "succeeded" {
			b.Fatalf("decommission: %s", st)
		}
		return created, time.Since(start)
	}
	run(-1) // the first launch pulls the image; the rest find it cached
	var create, teardown []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, d := run(i)
		create, teardown = append(create, c), append(teardown, d)
	}
	b.StopTimer()
	percentiles(b, "create-running", create)
	percentiles(b, "decommission", teardown)
}
