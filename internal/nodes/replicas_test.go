package nodes_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// twoReplicas starts two servers over one PostgreSQL database and one NATS.
func twoReplicas(t testing.TB) (a, b *servertest.Server) { return servertest.TwoReplicas(t) }

// waitPolling returns once n long polls wait on srv's wake-ups (what an
// agent's poll does right after its one look found nothing).
func waitPolling(t testing.TB, srv *servertest.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for srv.App.Nodes.Wake.Waiting() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d polls waiting, want %d", srv.App.Nodes.Wake.Waiting(), n)
		}
		time.Sleep(time.Millisecond) // another goroutine's HTTP request; no hook to wait on
	}
}

// crossReplicaWakes queues n tasks through replica a, one at a time, each
// while the agent's long poll waits on replica b, and returns how long each
// took from the enqueue to the poll's answer. B's slow fallback is 60 s, so
// only a wake-up over NATS answers within the 10 s this allows.
func crossReplicaWakes(t testing.TB, n int) []time.Duration {
	a, b := twoReplicas(t)
	admin := b.Admin() // the second replica's seeding reset the admin's password: its credentials are current
	ag := join(t, a, admin, "gpu-1", 0)
	poller := client.New(b.URL, ag.token(t))
	poller.HTTP.Timeout = 0
	ctx := context.Background()
	var lat []time.Duration
	for i := range n {
		got := make(chan []nodeapi.Task, 1)
		go func() {
			tasks, err := poller.PollNodeTasks(ctx, ag.id, 55)
			if err != nil {
				t.Error(err)
			}
			got <- tasks
		}()
		waitPolling(t, b, 1)
		start := time.Now()
		if _, err := a.App.Nodes.EnqueueTask(ctx, nil, ag.id, nodeapi.KindWorkloadInspect, map[string]any{"instance_id": "x"}, "", a.Creds.ProjectID); err != nil {
			t.Fatal(err)
		}
		select {
		case tasks := <-got:
			lat = append(lat, time.Since(start))
			if len(tasks) != 1 {
				t.Fatalf("poll %d on replica B got %d tasks", i, len(tasks))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("poll %d on replica B did not wake within 10 s of a task queued on replica A (its fallback look is 60 s away)", i)
		}
	}
	slices.Sort(lat)
	return lat
}

// A task queued through replica A wakes the agent's long poll held by
// replica B at once: the wake-up travels over NATS, not through B's slow
// fallback look. (How fast: BenchmarkCrossReplicaWake.)
func TestTaskQueuedOnOneReplicaWakesAPollOnAnother(t *testing.T) {
	t.Parallel()
	crossReplicaWakes(t, 10)
}

// BenchmarkCrossReplicaWake: enqueue on replica A → the long poll held by
// replica B answers, over one PostgreSQL and one NATS.
//
//	GPUAAS_TEST_DATABASE_URL=… go test ./internal/nodes -run '^$' -bench BenchmarkCrossReplicaWake -benchtime 200x
func BenchmarkCrossReplicaWake(b *testing.B) {
	lat := crossReplicaWakes(b, b.N)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.Logf("slowest: %v", lat[max(0, len(lat)-5):])
}

// BenchmarkIdleAgents: 1,000 simulated agents long-poll one server with
// the agent's wait (60 s) and nothing queued, their first polls spread over
// a minute as real agents' are. It counts the statements the database runs
// over two minutes of that, less what the server runs with no agent at all
// over as long (its workers), per agent per minute: with the wake-up path
// (slow fallback 60 s) and with the old one-second fallback side by side.
//
//	GPUAAS_TEST_DATABASE_URL=… go test ./internal/nodes -run '^$' -bench BenchmarkIdleAgents -benchtime 1x
func BenchmarkIdleAgents(b *testing.B) {
	for _, bc := range []struct {
		name string
		slow time.Duration
	}{{"wakeup-60s-fallback", 0}, {"old-1s-fallback", time.Second}} {
		b.Run(bc.name, func(b *testing.B) {
			s := servertest.Start(b, store.Postgres)
			if bc.slow > 0 {
				s.App.Nodes.SlowPoll = bc.slow
			}
			ids := seedNodes(b, s.DB, 1000, 1)
			const window = 2 * time.Minute
			q0 := s.DB.Statements()
			time.Sleep(window) // the server alone: what its workers cost
			background := s.DB.Statements() - q0
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i, id := range ids {
				tok, err := s.App.Tokens.Issue(principal.Principal{Type: principal.Node, ID: id}, "")
				if err != nil {
					b.Fatal(err)
				}
				c := client.New(s.URL, tok.AccessToken)
				c.HTTP.Timeout = 0
				wg.Add(1)
				go func() {
					defer wg.Done()
					select { // agents start at different times
					case <-time.After(time.Duration(i) * wakeup60 / time.Duration(len(ids))):
					case <-ctx.Done():
						return
					}
					for ctx.Err() == nil {
						_, _ = c.PollNodeTasks(ctx, id, int(wakeup60.Seconds()))
					}
				}()
			}
			time.Sleep(wakeup60 + 5*time.Second) // every agent polling, first looks done
			for b.Loop() {
				q1 := s.DB.Statements()
				time.Sleep(window)
				perAgentMinute := float64(s.DB.Statements()-q1-background) / float64(len(ids)) / window.Minutes()
				b.ReportMetric(perAgentMinute, "queries/agent/min")
				b.ReportMetric(float64(background)/window.Minutes(), "server-alone-queries/min")
			}
			cancel()
			wg.Wait()
		})
	}
}

const wakeup60 = 60 * time.Second

// A long poll may wait longer than the server's write timeout: its answer
// is still written. The timeout bounds every other request too, the
// admin's sign-in (a password hash, slow under -race on a busy machine)
// among them: 1 s cut it off once, so it is 3 s, and the poll 4 s.
func TestLongPollOutlivesTheWriteTimeout(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite, func(c *config.Config) { c.WriteTimeout = 3 * time.Second })
	ag := join(t, s, s.Admin(), "gpu-1", 0)
	c := client.New(s.URL, ag.token(t))
	start := time.Now()
	tasks, err := c.PollNodeTasks(context.Background(), ag.id, 4)
	if err != nil || len(tasks) != 0 {
		t.Fatalf("poll of 4 s with a 3 s write timeout: %v %v", tasks, err)
	}
	if d := time.Since(start); d < 4*time.Second {
		t.Errorf("the poll returned after %v; it should have waited 4 s", d)
	}
}

// Replicas remember a node's standing to spare idle agents a query per
// poll; a removal through one replica is still refused by the other at once.
//
// Serial (no t.Parallel): "at once" is bounded (2 s), which other tests'
// load would stretch.
func TestNodeRemovedOnOneReplicaIsRefusedOnAnother(t *testing.T) {
	a, b := twoReplicas(t)
	admin := b.Admin()
	ag := join(t, a, admin, "gpu-1", 0)
	tok := ag.token(t)
	onB := client.New(b.URL, tok)
	if _, err := onB.PollNodeTasks(context.Background(), ag.id, 0); err != nil {
		t.Fatalf("poll before removal: %v", err)
	}
	a.As(admin.Token).Do("POST", "/api/v1/admin/nodes/"+ag.id+"/remove", nil).Want(t, 200)
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := onB.PollNodeTasks(context.Background(), ag.id, 0)
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Status == 401 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica B still accepts a removed node's token 2 s after the removal: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // the hint crosses NATS; nothing here to wait on
	}
}
