package servertest

import (
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/config"
)

// WithClock runs the server on c: every service reads c's time, and the
// test moves it (c.Advance, c.Set) instead of sleeping.
func WithClock(c *clock.Manual) Option {
	return func(cfg *config.Config) { cfg.Now = c.Now }
}

// now is the server's clock (WithClock), or the wall clock for a server
// in another process (no App).
func (s *Server) now() time.Time {
	if s.App == nil {
		return time.Now()
	}
	return s.App.Now()
}
