package httpapi

import (
	"net/http"
	"sync"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/principal"
)

// MaxStreamsPerPrincipal bounds the event streams (SSE and WebSocket
// alike, the console's live pages included: one per open tab) one
// principal holds open on one replica. Each open stream costs a
// connection, goroutines, a write buffer and its own reads of the event
// log and of the caller's access (every Reauthorize period); without a
// bound, one project viewer's token could open thousands and load the
// database every other tenant shares.
const MaxStreamsPerPrincipal = 32

// streamSlots counts the open streams of each principal on this replica.
type streamSlots struct {
	mu   sync.Mutex
	open map[string]int
}

// take holds a stream slot of r's principal; release gives it back. A
// principal holding MaxStreamsPerPrincipal gets a 429 to act on.
func (s *streamSlots) take(r *http.Request) (release func(), err error) {
	key := principal.From(r.Context()).Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[key] >= MaxStreamsPerPrincipal {
		return nil, errdefs.RateLimited("too_many_streams", 5, map[string]any{"max_streams": MaxStreamsPerPrincipal},
			"this caller already holds the most event streams one caller may hold open on a server; close one (each console tab "+
				"with a live page holds one) or follow one stream and share its events")
	}
	if s.open == nil {
		s.open = map[string]int{}
	}
	s.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.open[key]--; s.open[key] == 0 {
				delete(s.open, key)
			}
		})
	}, nil
}
