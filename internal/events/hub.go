package events

import "sync"

// Hub wakes the streams of this process when new events are sequenced: the
// relay (or a bus notice from the relay of another replica) calls Notify,
// and every waiting stream re-reads the outbox. It carries no events, only
// the news that there may be some, so a missed wake-up costs at most one
// poll interval, never an event.
type Hub struct {
	mu     sync.Mutex
	ch     chan struct{}
	access chan struct{}
}

// Wait returns a channel closed at the next Notify.
func (h *Hub) Wait() <-chan struct{} { return h.wait(&h.ch) }

// Notify wakes every stream waiting now.
func (h *Hub) Notify() { h.notify(&h.ch) }

// AccessWait returns a channel closed at the next AccessChanged.
func (h *Hub) AccessWait() <-chan struct{} { return h.wait(&h.access) }

// AccessChanged wakes every open stream of this process to re-check its
// reader's access now (a role binding was removed, an account disabled or
// deleted). Streams also re-check on their own every Reader.Reauthorize,
// which covers changes made through another replica.
func (h *Hub) AccessChanged() { h.notify(&h.access) }

func (h *Hub) wait(ch *chan struct{}) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if *ch == nil {
		*ch = make(chan struct{})
	}
	return *ch
}

func (h *Hub) notify(ch *chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if *ch != nil {
		close(*ch)
	}
	*ch = make(chan struct{})
}
