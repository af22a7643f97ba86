package main_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/gpuaas/gpuaas/internal/testbin"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsProc is an external nats-server process (the Debian package).
type natsProc struct {
	cmd  *exec.Cmd
	port int
	dir  string
	out  *testbin.Output
}

func natsBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("nats-server is not installed but CI=true: .ci/run installs it (apt-get install nats-server)")
		}
		t.Skip("!!! SKIPPING EXTERNAL NATS TEST: install nats-server (apt-get install -y nats-server) !!!")
	}
	return bin
}

// startNATS runs nats-server with JetStream on a file store in dir and
// waits until it accepts connections.
func startNATS(t *testing.T, dir string, port int) *natsProc {
	t.Helper()
	p := &natsProc{port: port, dir: dir, out: &testbin.Output{}}
	p.start(t)
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *natsProc) url() string { return "nats://127.0.0.1:" + strconv.Itoa(p.port) }

func (p *natsProc) start(t *testing.T) {
	t.Helper()
	p.cmd = exec.Command(natsBinary(t), "-js", "-sd", p.dir, "-a", "127.0.0.1", "-p", strconv.Itoa(p.port))
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(p.port)); err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nats-server not listening within 10 s:\n%s", p.out)
}

// stop shuts NATS down cleanly (SIGTERM flushes its store).
func (p *natsProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if _, err := p.cmd.Process.Wait(); err != nil {
		t.Fatal(err)
	}
}

func (p *natsProc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_, _ = p.cmd.Process.Wait()
	}
}

func kill9(t *testing.T, p *devProc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = p.cmd.Process.Wait()
}

// eventSink collects what an SSE consumer receives.
type eventSink struct {
	mu  sync.Mutex
	got []client.Event
	ch  chan struct{}
}

func (s *eventSink) add(e client.Event) error {
	s.mu.Lock()
	s.got = append(s.got, e)
	s.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
	default:
	}
	return nil
}

func (s *eventSink) snapshot() []client.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// waitUnique waits until n distinct event ids arrived.
func (s *eventSink) waitUnique(t *testing.T, n int, timeout time.Duration) []client.Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		got := s.snapshot()
		if len(uniqueIDs(got)) >= n {
			return got
		}
		select {
		case <-s.ch:
		case <-deadline:
			t.Fatalf("stream delivered %d distinct events, want %d", len(uniqueIDs(got)), n)
		}
	}
}

func uniqueIDs(evs []client.Event) map[string]bool {
	m := map[string]bool{}
	for _, e := range evs {
		m[e.ID] = true
	}
	return m
}

func follow(ctx context.Context, t *testing.T, c *client.Client, projectID string) *eventSink {
	s := &eventSink{ch: make(chan struct{}, 1)}
	go func() {
		if err := c.StreamEvents(ctx, projectID, "", s.add); err != nil {
			t.Errorf("stream ended: %v", err)
		}
	}()
	return s
}

// mutator creates service accounts sa-000… one after another against any of
// the given clients, retrying a slug whose request died with the server
// until the outcome is known: 201, or 409 because the earlier attempt had
// committed. Each slug is therefore exactly one committed mutation. Every
// fifth slug is also re-submitted once after it committed: a rolled-back
// mutation (409) that must emit nothing.
type mutator struct {
	mu      sync.Mutex
	acked   int
	clients func(i int) *client.Client
}

func (m *mutator) run(ctx context.Context, t *testing.T, projectID string, n int) {
	path := "/api/v1/projects/" + projectID + "/service-accounts"
	for i := 0; i < n; i++ {
		slug := fmt.Sprintf("sa-%03d", i)
		for {
			c := m.clients(i)
			err := c.Do(ctx, "POST", path, nil, map[string]any{"name": slug, "slug": slug}, nil)
			var api *client.APIError
			if err == nil || (errors.As(err, &api) && api.Code == "service_account_exists") {
				break
			}
			if ctx.Err() != nil {
				return
			}
			time.Sleep(50 * time.Millisecond) // the server is restarting
		}
		if i%5 == 4 {
			err := m.clients(i).Do(ctx, "POST", path, nil, map[string]any{"name": slug, "slug": slug}, nil)
			var api *client.APIError
			if !errors.As(err, &api) || api.Status != 409 {
				// A connection error here is fine: nothing committed either.
				if api != nil {
					t.Errorf("duplicate %s: %v", slug, err)
				}
			}
		}
		m.mu.Lock()
		m.acked++
		m.mu.Unlock()
	}
}

func (m *mutator) waitAcked(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		m.mu.Lock()
		a := m.acked
		m.mu.Unlock()
		if a >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("mutations stalled before %d", n)
}

func login(t *testing.T, url, email, password string) *client.Client {
	t.Helper()
	c := client.New(url, "")
	c.HTTP.Timeout = 10 * time.Second
	if _, err := c.Login(context.Background(), email, password); err != nil {
		t.Fatal(err)
	}
	return c
}

// checkStream asserts the stream carried exactly one event per committed
// service account, in commit order with contiguous sequences.
func checkStream(t *testing.T, got []client.Event, n int) {
	t.Helper()
	seen := map[string]bool{}
	var seqs []int64
	slugs := map[string]bool{}
	for _, e := range got {
		if seen[e.ID] {
			continue // exactly once after dedupe by id
		}
		seen[e.ID] = true
		seqs = append(seqs, e.Sequence)
		if e.Type != "iam.service_account.created" {
			t.Fatalf("unexpected event %s", e.Type)
		}
		var d struct {
			Slug string `json:"slug"`
		}
		_ = json.Unmarshal(e.Data, &d)
		if slugs[d.Slug] {
			t.Fatalf("two events for %s", d.Slug)
		}
		slugs[d.Slug] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct events, want %d (one per committed mutation)", len(seen), n)
	}
	for i := range seqs {
		if seqs[i] != int64(i+1) {
			t.Fatalf("sequence %d at index %d: a gap or reordering (%v)", seqs[i], i, seqs)
		}
	}
}

// checkJetStream reads the whole event stream and asserts every committed
// event is there, deduplicated by Nats-Msg-Id.
func checkJetStream(t *testing.T, url string, opts []nats.Option, n int) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := map[string]bool{}
	msgs := 0
	for len(ids) < n && ctx.Err() == nil {
		cons, err := js.OrderedConsumer(ctx, "GPUAAS_EVENTS", jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		ids, msgs = map[string]bool{}, 0
		for {
			m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
			if err != nil {
				break
			}
			ids[m.Headers().Get(jetstream.MsgIDHeader)] = true
			msgs++
		}
	}
	if len(ids) != n {
		t.Fatalf("JetStream holds %d distinct events (%d messages), want %d", len(ids), msgs, n)
	}
	t.Logf("JetStream: %d messages, %d distinct ids", msgs, len(ids))
}

// Kill -9 in the middle of a stream of mutations, restart: a client that
// resumes with its last id gets every committed mutation's event, in commit
// order, with no gap, exactly once; rolled-back mutations emit nothing.
// Runs with the embedded NATS of `gpuaas dev` and with an external
// nats-server, which is also stopped and restarted mid-stream.
func TestEventsSurviveKill9(t *testing.T) {
	for _, mode := range []string{"embedded", "external"} {
		t.Run(mode, func(t *testing.T) {
			bin := buildBinary(t)
			dataDir := filepath.Join(t.TempDir(), "data")
			port := freePort(t)
			// No node and no release of this binary: the event log holds
			// the mutations' events only, so its sequence has no gaps.
			extra := []string{"--node=false", "--serve-own-build=false", "--events-relay-interval", "100ms", "--events-lease-ttl", "1s", "--log-level", "warn"}
			var nproc *natsProc
			natsURL, natsPort := "", freePort(t)
			if mode == "external" {
				nproc = startNATS(t, t.TempDir(), natsPort)
				natsURL = nproc.url()
				extra = append(extra, "--nats-url", natsURL)
			} else {
				extra = append(extra, "--nats-listen", "127.0.0.1:"+strconv.Itoa(natsPort))
			}
			p, took := startDev(t, bin, dataDir, port, extra...)
			t.Logf("ready after %v", took)
			creds := readCreds(t, dataDir)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			c := login(t, creds.APIURL, creds.AdminEmail, creds.AdminPassword)
			sink := follow(ctx, t, client.New(creds.APIURL, c.Token), creds.ProjectID)
			const n = 40
			m := &mutator{clients: func(int) *client.Client { return c }}
			done := make(chan struct{})
			go func() { defer close(done); m.run(ctx, t, creds.ProjectID, n) }()

			m.waitAcked(t, 12)
			kill9(t, p)
			p, _ = startDev(t, bin, dataDir, port, extra...)
			if nproc != nil {
				m.waitAcked(t, 22)
				nproc.stop(t)
				m.waitAcked(t, 28) // mutations commit while NATS is down
				nproc.start(t)
			}
			<-done
			got := sink.waitUnique(t, n, 60*time.Second)
			checkStream(t, got, n)
			if len(got) != n {
				t.Fatalf("the stream delivered %d events for %d distinct ids: a resume repeated events", len(got), n)
			}
			var opts []nats.Option
			url := natsURL
			if url == "" {
				url = "nats://127.0.0.1:" + strconv.Itoa(natsPort)
				pw, err := os.ReadFile(filepath.Join(dataDir, "nats.password"))
				if err != nil {
					t.Fatal(err)
				}
				opts = append(opts, nats.UserInfo("gpuaas", strings.TrimSpace(string(pw))))
			}
			checkJetStream(t, url, opts, n)
			p.stop(t)
		})
	}
}

// Two replicas over one PostgreSQL and one NATS: one relay publishes at a
// time; killing the leader hands over; no event is lost and none reaches a
// consumer twice.
func TestEventsTwoReplicas(t *testing.T) {
	bin := buildBinary(t)
	dbURL := storetest.URL(t, store.Postgres)
	nproc := startNATS(t, t.TempDir(), freePort(t))
	// One data dir each (a data dir is locked by its gpuaas dev), one
	// master key for both: the replicas share the database's sealed keys.
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))
	// No node and no release of this binary: only the mutations' events.
	extra := []string{"--database-url", dbURL, "--nats-url", nproc.url(), "--secret-key", key, "--node=false", "--serve-own-build=false",
		"--events-relay-interval", "100ms", "--events-lease-ttl", "1s", "--log-level", "warn"}
	portA, portB := freePort(t), freePort(t)
	a, _ := startDev(t, bin, dirA, portA, extra...)
	b, _ := startDev(t, bin, dirB, portB, extra...)
	creds := readCreds(t, dirB) // the last seed set the admin's password
	urlA, urlB := "http://127.0.0.1:"+strconv.Itoa(portA), "http://127.0.0.1:"+strconv.Itoa(portB)
	ca := login(t, urlA, creds.AdminEmail, creds.AdminPassword)
	cb := login(t, urlB, creds.AdminEmail, creds.AdminPassword)

	db, err := store.Open(context.Background(), dbURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// leaderPID waits for a live lease (held by want, when want > 0) and
	// returns the pid in its holder name (host/pid/random).
	leaderPID := func(want int) int {
		pid := 0
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			holder, until, err := db.Queries().LeaseHolder(context.Background(), "events.relay")
			if parts := strings.Split(holder, "/"); err == nil && until.After(time.Now()) && len(parts) == 3 {
				pid, _ = strconv.Atoi(parts[1])
				if want == 0 || pid == want {
					return pid
				}
			}
		}
		t.Fatalf("lease not held by %d within 10 s (last holder pid %d)", want, pid)
		return 0
	}
	// The leader dies; the consumer and the mutations stay on the survivor
	// after it (mutations alternate until then).
	leader, survivor, cs, survivorURL := a, b, cb, urlB
	if leaderPID(0) == b.cmd.Process.Pid {
		leader, survivor, cs, survivorURL = b, a, ca, urlA
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sink := follow(ctx, t, client.New(survivorURL, cs.Token), creds.ProjectID)
	var killed sync.Mutex
	dead := false
	const n = 40
	m := &mutator{clients: func(i int) *client.Client {
		killed.Lock()
		defer killed.Unlock()
		if dead || i%2 == 0 {
			return cs
		}
		if leader == a {
			return ca
		}
		return cb
	}}
	done := make(chan struct{})
	go func() { defer close(done); m.run(ctx, t, creds.ProjectID, n) }()
	m.waitAcked(t, 15)
	killed.Lock()
	kill9(t, leader)
	dead = true
	killed.Unlock()
	<-done
	leaderPID(survivor.cmd.Process.Pid) // the survivor took over
	got := sink.waitUnique(t, n, 60*time.Second)
	checkStream(t, got, n)
	if len(got) != n {
		t.Fatalf("the consumer saw %d events for %d ids", len(got), n)
	}
	checkJetStream(t, nproc.url(), nil, n)
	survivor.stop(t)
}

// BenchmarkDevReady measures `gpuaas dev` from exec to /readyz with NATS
// JetStream embedded: on a fresh data dir (migrations, keys, seed, a new
// JetStream store) and restarting over an existing one.
func BenchmarkDevReady(b *testing.B) {
	bin := buildBinary(b)
	for _, restart := range []bool{false, true} {
		b.Run(map[bool]string{false: "fresh", true: "restart"}[restart], func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				dataDir := filepath.Join(b.TempDir(), "data")
				port := freePort(b)
				if restart {
					p, _ := startDev(b, bin, dataDir, port)
					p.stop(b)
				}
				p, took := startDev(b, bin, dataDir, port)
				total += took
				p.stop(b)
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms_to_ready")
			b.ReportMetric(0, "ns/op")
		})
	}
}
