package wakeup

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

func TestNotifyWakesWaitersOfItsTopicOnly(t *testing.T) {
	h := New()
	a, b := h.Wait("a"), h.Wait("b")
	if a2 := h.Wait("a"); a2 != a {
		t.Fatal("two waiters of one topic got different channels")
	}
	h.Notify("a")
	select {
	case <-a:
	default:
		t.Fatal("a's waiter was not woken")
	}
	select {
	case <-b:
		t.Fatal("b's waiter was woken by a's notify")
	default:
	}
	if h.Wait("a") == a {
		t.Error("a woken channel was handed out again")
	}
	h.Notify("nobody") // no waiter: nothing to do, nothing kept
	if h.Waiting() != 2 {
		t.Errorf("waiting topics: %d", h.Waiting())
	}
}

// Two hubs on one NATS server stand for two replicas: a notify on one wakes
// the other's waiter.
func TestNATSLinksReplicas(t *testing.T) {
	ns := startNATS(t)
	conn := func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	a, stopA, err := NewNATS(conn())
	if err != nil {
		t.Fatal(err)
	}
	defer stopA()
	b, stopB, err := NewNATS(conn())
	if err != nil {
		t.Fatal(err)
	}
	defer stopB()
	onB := b.Wait(NodeTasks("n1"))
	other := b.Wait(NodeTasks("n2"))
	onA := a.Wait(NodeTasks("n1"))
	a.Notify(NodeTasks("n1"))
	for name, c := range map[string]<-chan struct{}{"replica A": onA, "replica B": onB} {
		select {
		case <-c:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s's waiter was not woken", name)
		}
	}
	select {
	case <-other:
		t.Error("another node's waiter was woken")
	case <-time.After(50 * time.Millisecond):
	}
}

// A replica whose NATS connection drops misses what the others notify
// meanwhile; once it is back, its waiters are woken (they look again) and
// its listeners run (caches forget), and the reconnect handler set before
// still runs.
func TestNATSReconnectWakesWhatItMayHaveMissed(t *testing.T) {
	ns := startNATS(t)
	ncA, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer ncA.Close()
	// B dials through a gate, so the test decides when it is back.
	gate := &gatedDialer{open: make(chan struct{}, 1)}
	gate.open <- struct{}{}
	reconnected := make(chan struct{}, 1)
	ncB, err := nats.Connect(ns.ClientURL(), nats.SetCustomDialer(gate), nats.ReconnectWait(10*time.Millisecond),
		nats.MaxReconnects(-1), nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer ncB.Close()
	a, stopA, err := NewNATS(ncA)
	if err != nil {
		t.Fatal(err)
	}
	defer stopA()
	b, stopB, err := NewNATS(ncB)
	if err != nil {
		t.Fatal(err)
	}
	defer stopB()
	forgot := make(chan struct{}, 1)
	b.OnNotify(NodeAccess, func() {
		select {
		case forgot <- struct{}{}:
		default:
		}
	})
	onB := b.Wait(NodeTasks("n1"))

	id, err := ncB.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.DisconnectClientByID(id); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ncB.Status() != nats.RECONNECTING; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("B's connection is %v, not reconnecting", ncB.Status())
		}
	}
	a.Notify(NodeTasks("n1")) // B is away: it cannot hear this
	a.Notify(NodeAccess)
	if err := ncA.Flush(); err != nil {
		t.Fatal(err)
	}
	gate.open <- struct{}{}
	for name, c := range map[string]<-chan struct{}{"the waiter": onB, "the listener": forgot, "the earlier reconnect handler": reconnected} {
		select {
		case <-c:
		case <-time.After(5 * time.Second):
			t.Fatalf("after B reconnected, %s was not run or woken", name)
		}
	}
}

// gatedDialer dials once per token in open.
type gatedDialer struct{ open chan struct{} }

func (d *gatedDialer) Dial(network, address string) (net.Conn, error) {
	select {
	case <-d.open:
	case <-time.After(10 * time.Second): // a test that failed early
	}
	return net.Dial(network, address)
}

// startNATS runs an in-process NATS server until the test ends.
func startNATS(t *testing.T) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	return ns
}
