// Package wakeup is how a waiter in gpuaas learns that what it waits for
// may have changed: "a task was queued for node N", and the like. A waiter
// takes a channel for its topic before it looks, looks, and if there is
// nothing, waits for the channel or its slow fallback timer; a writer
// notifies the topic once its transaction committed.
//
// A Hub wakes waiters in this process. Linked to NATS (NewNATS), a notify on
// any replica wakes the waiters of every replica, so a long poll held by
// replica B hears of a task queued through replica A at once instead of at
// its next fallback look. Notifications are hints, never data: one that is
// lost costs a waiter its fallback delay, nothing more.
package wakeup

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// Hub holds the waiters of one process, by topic.
type Hub struct {
	mu        sync.Mutex
	waiters   map[string]chan struct{}
	listeners map[string][]func()
	publish   func(topic string) // to the other replicas; nil: this process only
}

// New returns a hub for this process only.
func New() *Hub { return &Hub{waiters: map[string]chan struct{}{}, listeners: map[string][]func(){}} }

// OnNotify runs f at every notify of topic, here or on another replica
// (a cache that must forget). Every registration stays; f must not block.
func (h *Hub) OnNotify(topic string, f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listeners[topic] = append(h.listeners[topic], f)
}

// Wait returns a channel that is closed by the next Notify of topic. Take
// it before looking, so a notify between the look and the wait is not
// missed.
func (h *Hub) Wait(topic string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.waiters[topic]
	if !ok {
		c = make(chan struct{})
		h.waiters[topic] = c
	}
	return c
}

// Notify wakes topic's waiters here and, when linked, on every replica.
func (h *Hub) Notify(topic string) {
	h.deliver(topic)
	if h.publish != nil {
		h.publish(topic)
	}
}

func (h *Hub) deliver(topic string) {
	h.mu.Lock()
	if c, ok := h.waiters[topic]; ok {
		close(c)
		delete(h.waiters, topic)
	}
	fs := h.listeners[topic]
	h.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// deliverAll wakes every waiter and runs every listener, of every topic:
// what a replica does when it may have missed notifications.
func (h *Hub) deliverAll() {
	h.mu.Lock()
	for topic, c := range h.waiters {
		close(c)
		delete(h.waiters, topic)
	}
	var fs []func()
	for _, l := range h.listeners {
		fs = append(fs, l...)
	}
	h.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Waiting reports how many topics have waiters (tests, metrics).
func (h *Hub) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.waiters)
}

// Subject is the NATS subject prefix of notifications.
const Subject = "gpuaas.wake."

// NewNATS returns a hub linked to every replica connected to nc: a Notify
// is published on Subject+topic (core NATS, no JetStream: a hint needs no
// storage), and a notification from another replica wakes this one's
// waiters. While the connection is down, the notifications of other
// replicas do not reach this one; when it is back (and the subscription
// with it), every waiter is woken and every listener run, as if each topic
// had been notified, so nothing waits for its fallback nor trusts a cache
// for what it may have missed. The returned stop unsubscribes.
func NewNATS(nc *nats.Conn) (*Hub, func(), error) {
	h := New()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	self := hex.EncodeToString(b)
	sub, err := nc.Subscribe(Subject+">", func(m *nats.Msg) {
		if string(m.Data) == self {
			return // our own notify: already delivered here
		}
		h.deliver(strings.TrimPrefix(m.Subject, Subject))
	})
	if err != nil {
		return nil, nil, err
	}
	// Once the server has the subscription, no notify sent after NewNATS
	// returns can miss this replica.
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, nil, err
	}
	h.publish = func(topic string) { _ = nc.Publish(Subject+topic, []byte(self)) }
	// nats.go has one reconnect handler: keep the one set before, and call
	// it first. nats.go sends the subscriptions again before calling it.
	var stopped atomic.Bool
	prev := nc.ReconnectHandler()
	nc.SetReconnectHandler(func(c *nats.Conn) {
		if prev != nil {
			prev(c)
		}
		if !stopped.Load() {
			h.deliverAll()
		}
	})
	return h, func() {
		stopped.Store(true)
		_ = sub.Unsubscribe()
	}, nil
}

// EventsCommitted is the topic of "a mutation committed events to the
// outbox": the relay, wherever it runs, sequences and publishes them.
const EventsCommitted = "events-committed"

// EventsSequenced is the topic of "the relay gave outbox rows their
// positions": every replica's event streams read on.
const EventsSequenced = "events-sequenced"

// AccessChanged is the topic of "someone may have lost access" (a role
// binding removed, an account disabled or deleted): every open event stream
// re-checks its reader at once.
const AccessChanged = "access-changed"

// ConsoleSessionEnded is the topic of "a console session was signed out or
// ended by its account": the event streams the console relays look at
// their sessions at once.
const ConsoleSessionEnded = "console-session-ended"

// NodeAccess is the topic of "a node was removed or its tokens were cut":
// every replica forgets the node credentials it checked.
const NodeAccess = "node-access"

// InstanceOperations is the topic of "an instance operation was queued or
// can move on" (a request queued one, a node task it waits on finished, a
// node came back): every replica's instance driver takes a pass, and the one
// that wins the operation's lease advances it.
const InstanceOperations = "instance-operations"

// NodeTasks is the topic of the tasks queued for one node.
func NodeTasks(nodeID string) string { return "node-tasks." + nodeID }
