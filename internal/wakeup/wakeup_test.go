package wakeup

import (
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
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
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
