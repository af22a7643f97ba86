package billing

import (
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/ratelimit"
)

// Usage-ingest limits (the server's defaults; see --usage-event-rate and
// --usage-event-burst).
const (
	// DefaultUsageEventRate is the usage events per second one instance
	// may report, sustained. The scaffolded apps report one event every
	// 10 s (0.1 a second): a thousandfold margin.
	DefaultUsageEventRate = 100
	// DefaultUsageEventBurst is how many usage events one instance may
	// report at once: two full batches, so an app that buffered while the
	// API was unreachable can flush.
	DefaultUsageEventBurst = 20_000
	// maxLimitedInstances bounds the limiter's memory; past it, the
	// instance quiet the longest is forgotten.
	maxLimitedInstances = 100_000
)

// takeUsage spends n events of instance id's ingest budget, or spends
// nothing and refuses. Each event is a row (and a dedupe key) to write,
// so a batch costs its events; duplicates cost the same, since finding
// them is work for the database too. Per replica, like every limiter in
// this process.
func (s *Service) takeUsage(id string, n int) error {
	wait := s.usageLimit.Take(id, n)
	if wait == 0 {
		return nil
	}
	burst := s.usageLimit.Burst()
	if n > burst {
		return errdefs.Invalid("usage_batch_too_large",
			"this batch has %d events; this server takes at most %d at once from one instance (--usage-event-burst); send smaller batches", n, burst)
	}
	secs := ratelimit.RetryAfterSeconds(wait)
	return errdefs.RateLimited("usage_rate_limited", secs, map[string]any{"events": n},
		"this instance reported more usage events than this server takes (%g a second, bursts of %d); nothing of this batch was recorded: "+
			"send it again in %ds (the same ids, so nothing counts twice), and report less often, summing more use into each event",
		s.usageLimit.Rate(), burst, secs)
}
