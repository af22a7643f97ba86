package httpapi_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/instances/instancetest"
	"github.com/gpuaas/gpuaas/internal/server"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// devProcess is `gpuaas dev` as a real child process, so the test can
// SIGKILL it and start it again on the same data directory and port.
type devProcess struct {
	t       *testing.T
	bin     string
	dataDir string
	listen  string
	cmd     *exec.Cmd
	env     []string // added to the environment of the next start
}

// buildGpuaas is the gpuaas binary, built once per test process.
func buildGpuaas(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the gpuaas binary; skipped with -short")
	}
	return testbin.Gpuaas(t)
}

// start starts gpuaas dev and waits until it is ready. The first start
// binds port 0 and learns the port from --addr-file; a restart binds that
// same port again (the node, the agent and the test's clients know the URL),
// which the killed process held until it died.
func (p *devProcess) start() {
	p.t.Helper()
	listen := p.listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	addrFile := filepath.Join(p.t.TempDir(), "addr") // fresh: a killed process leaves its own behind
	p.cmd = exec.Command(p.bin, "dev", "--data-dir", p.dataDir, "--listen", listen, "--addr-file", addrFile,
		"--node=false", "--node-task-lease", "2s", "--credential-rate", "1000", "--credential-burst", "1000")
	log, err := os.OpenFile(filepath.Join(p.dataDir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	defer log.Close()
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if len(p.env) > 0 {
		p.cmd.Env = append(os.Environ(), p.env...)
	}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	base := testbin.WaitReady(p.t, addrFile, 30*time.Second, func() string {
		b, _ := os.ReadFile(filepath.Join(p.dataDir, "server.log"))
		return string(b)
	})
	p.listen = strings.TrimPrefix(base, "http://")
}

// kill sends SIGKILL: no shutdown path runs.
func (p *devProcess) kill() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	_ = p.cmd.Wait()
}

// startDev starts `gpuaas dev --node=false` as a child process (killed when
// the test ends) and returns it with a test server on its credentials.
func startDev(t *testing.T, bin string) (*devProcess, *servertest.Server) {
	t.Helper()
	p := &devProcess{t: t, bin: bin, dataDir: t.TempDir()}
	p.start()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.kill()
		}
	})
	var creds server.DevCredentials
	b, err := os.ReadFile(server.CredentialsPath(p.dataDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &creds); err != nil {
		t.Fatal(err)
	}
	contract, err := servertest.LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	return p, &servertest.Server{T: t, URL: "http://" + p.listen, Creds: creds, Contract: contract}
}

// A server killed with SIGKILL while an instance deploys, and again while
// it is decommissioned, finishes both after a restart: the operation's
// phase and its queued node task are durable, and the node's unreported
// task is delivered again once its lease lapses. The node is simulated so
// the test can withhold a result deterministically; the same kills against
// a real agent and real containers are TestInstanceServerKillRealAgent.
//
// Serial (no t.Parallel): each restart binds the port the killed process
// held, which a parallel test's listener on port 0 could take meanwhile.
func TestInstanceSurvivesServerKill(t *testing.T) {
	p, s := startDev(t, buildGpuaas(t))
	e := setupInstanceEnv(t, s, "echo", map[string]v1.Image{"1.0.0": nil}, echoManifest("echo"), 1)

	// The node takes the run (and later the removal) but withholds the
	// first result: the server dies before it could learn it.
	var withheld atomic.Int32
	held := make(chan string, 4)
	e.node.serve(t, func(task nodeapi.Task) nodeapi.TaskResult {
		if (task.Kind == nodeapi.KindContainerRun || task.Kind == nodeapi.KindContainerRemove) && task.Attempt <= 1 && withheld.Add(1) <= 2 {
			held <- task.Kind
			return nodeapi.TaskResult{}
		}
		return okResult(task)
	})
	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "survivor", "target_allocation_id": e.alloc}).Want(t, 202)
	id := cr.String("id")
	waitHeld(t, held, nodeapi.KindContainerRun)
	if st := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200).String("status"); st != "deploying" {
		t.Fatalf("before the kill: %s", st)
	}
	p.kill()
	p.start()
	if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("deploy after restart: %s", op.Body)
	}

	dec := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
	waitHeld(t, held, nodeapi.KindContainerRemove)
	p.kill()
	p.start()
	if op := waitOp(t, e.bot, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
		t.Fatalf("decommission after restart: %s", op.Body)
	}
	got := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	if got.String("status") != "decommissioned" {
		t.Fatalf("after restart: %s", got.Body)
	}
	// The run was delivered twice (once per server life) and removed once
	// it was verified: the node saw remove and verify after the restart.
	kinds := map[string]int{}
	for _, task := range e.node.tasks() {
		kinds[task.Kind]++
	}
	if kinds[nodeapi.KindContainerRun] < 2 || kinds[nodeapi.KindContainerRemove] < 2 || kinds[nodeapi.KindTeardownVerify] < 1 {
		t.Fatalf("node tasks: %v", kinds)
	}
}

func waitHeld(t *testing.T, held chan string, kind string) {
	t.Helper()
	select {
	case k := <-held:
		if k != kind {
			t.Fatalf("withheld %s, want %s", k, kind)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the node never received %s", kind)
	}
}

// The acceptance: kill -9 the server during deploy and during
// decommission, with a real `gpuaas agent` process running real containers
// of an image pushed to the server's embedded registry. The app is slow to
// become ready (instancetest.ModeSlow), so the server dies while the agent
// waits for readiness; after a restart on the same data dir and port the
// deploy completes and the app answers. The agent is then frozen (SIGSTOP)
// so the server dies while the instance is decommissioning and its
// container still runs; after the restart the teardown completes and
// Docker holds nothing of the instance.
//
// Serial (no t.Parallel): each restart binds the port the killed process
// held, which a parallel test's listener on port 0 could take meanwhile,
// and the kill must land within half the app's 5 s readiness wait.
func TestInstanceServerKillRealAgent(t *testing.T) {
	d := agenttest.RequireDocker(t)
	bin := buildGpuaas(t)
	p, s := startDev(t, bin)
	e := setupInstanceEnv(t, s, "echo", map[string]v1.Image{"1.0.0": instancetest.Image(t, instancetest.Build(t, "1.0.0", instancetest.ModeSlow))}, echoManifest("echo"), -1)
	a, agentDir := e.withRealAgent(t, bin)

	cr := e.bot.Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0", "display_name": "survivor"}).Want(t, 202)
	id := cr.String("id")
	removeInstanceOnExit(t, d, id)
	// Kill the server once the agent has started the container: it is
	// inside the readiness wait, which lasts instancetest.SlowReadiness.
	deadline := time.Now().Add(90 * time.Second)
	for containerState(t, d, id) == "" {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(a.logPath())
			t.Fatalf("the agent never started the workload:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond) // waiting for another process's container
	}
	killedAt := time.Now()
	if st := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200).String("status"); st != "deploying" {
		t.Fatalf("before the kill: %s", st)
	}
	p.kill()
	if time.Since(killedAt) > instancetest.SlowReadiness/2 {
		t.Fatalf("the kill came %s after the container started: not inside the readiness wait", time.Since(killedAt))
	}
	started := containerState(t, d, id)
	p.start()
	if op := waitOp(t, e.bot, e.pid, cr.String("operation_id")); op.String("state") != "succeeded" {
		b, _ := os.ReadFile(a.logPath())
		t.Fatalf("deploy after restart: %s\nagent:\n%s", op.Body, b)
	}
	inst := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200)
	url := inst.JSON["access"].(map[string]any)["local_url"].(string)
	if inst.String("status") != "running" || !strings.Contains(httpGet(url), "version=1.0.0") {
		t.Fatalf("after restart: %s", inst.Body)
	}
	// One container, the one started before the kill (adopted, not a second run).
	if now := containerState(t, d, id); strings.Fields(now)[0] != strings.Fields(started)[0] {
		t.Fatalf("container %q, was %q", now, started)
	}

	a.signal(syscall.SIGSTOP)
	dec := e.bot.Do("POST", e.path("/app-instances/"+id+"/decommission"), nil).Want(t, 202)
	if st := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200).String("status"); st != "decommissioning" {
		t.Fatalf("before the second kill: %s", st)
	}
	p.kill()
	if containerState(t, d, id) == "" {
		t.Fatal("the container was gone before the kill: the kill was not during decommission")
	}
	a.signal(syscall.SIGCONT)
	p.start()
	if op := waitOp(t, e.bot, e.pid, dec.String("operation_id")); op.String("state") != "succeeded" {
		b, _ := os.ReadFile(a.logPath())
		t.Fatalf("decommission after restart: %s\nagent:\n%s", op.Body, b)
	}
	if st := e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200).String("status"); st != "decommissioned" {
		t.Fatalf("after restart: %s", st)
	}
	requireTornDown(t, d, id, agentDir)
}
