// Package clock is the one convention for reading the time: a service takes
// a `Now func() time.Time` hook (nil: the wall clock), and the server hands
// every service the same one. Tests hand it a Manual clock and move time
// instead of sleeping.
package clock

import (
	"sync"
	"time"
)

// Or is now, or the wall clock when now is nil.
func Or(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}

// Manual is a clock that moves only when told to; safe for concurrent use.
// Its Now method is the hook a service takes.
type Manual struct {
	mu sync.Mutex
	t  time.Time
}

// NewManual is a manual clock standing at t.
func NewManual(t time.Time) *Manual { return &Manual{t: t} }

// Now is the clock's time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.t
}

// Advance moves the clock forward by d (back, for a negative d) and
// returns the new time.
func (m *Manual) Advance(d time.Duration) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t = m.t.Add(d)
	return m.t
}

// Set puts the clock at t.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t = t
}
