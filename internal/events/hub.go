package events

import "sync"

// Hub wakes the streams of this process when new events are sequenced: the
// relay (or a bus notice from the relay of another replica) calls Notify,
// and every waiting stream re-reads the outbox. It carries no events, only
// the news that there may be some, so a missed wake-up costs at most one
// poll interval, never an event.
type Hub struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wait returns a channel closed at the next Notify.
func (h *Hub) Wait() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ch == nil {
		h.ch = make(chan struct{})
	}
	return h.ch
}

// Notify wakes every stream waiting now.
func (h *Hub) Notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ch != nil {
		close(h.ch)
	}
	h.ch = make(chan struct{})
}
