package servertest

import (
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/config"
)

// WithClock runs the server on c: every service reads c's time, and the
// test moves it (c.Advance, c.Set) instead of sleeping.
func WithClock(c *clock.Manual) Option {
	return func(cfg *config.Config) { cfg.Now = c.Now }
}
