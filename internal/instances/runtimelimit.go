package instances

import (
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/ratelimit"
)

// Runtime-event ingestion limits (the server's defaults; see
// --runtime-event-rate, --runtime-event-burst, --runtime-event-retention).
const (
	// DefaultRuntimeEventRate is the events per second one instance may
	// report, sustained: a heartbeat every few seconds and the odd health
	// or member change use a fraction of it.
	DefaultRuntimeEventRate = 10
	// DefaultRuntimeEventBurst is how many events one instance may report
	// at once: two full batches, so a workload that buffered while the API
	// was unreachable can flush.
	DefaultRuntimeEventBurst = 2 * MaxRuntimeBatch
	// DefaultRuntimeEventRetention is how many timeline rows recorded from
	// runtime events one instance keeps.
	DefaultRuntimeEventRetention = 10_000
	// maxLimitedInstances bounds the limiter's memory; past it, the
	// instance quiet the longest is forgotten.
	maxLimitedInstances = 100_000
)

// runtimeLimiter is a token bucket per instance, counted in events: a
// batch of 1,000 costs 1,000, a heartbeat costs one like any other event
// (each is work for the database: a heartbeat rewrites the instance's
// health row). It lives in this process, like the sign-in throttle: each
// replica keeps its own buckets, so behind N replicas an instance may
// report up to N times the rate, and a restart refills every bucket. That
// still bounds what one instance can write; the retention bounds what it
// can keep.
type runtimeLimiter struct {
	buckets *ratelimit.Keyed
}

// newRuntimeLimiter returns nil (no limit) for a rate of 0.
func newRuntimeLimiter(perSecond float64, burst int) *runtimeLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &runtimeLimiter{buckets: ratelimit.New(perSecond, burst, maxLimitedInstances)}
}

// take spends n events of instance id's budget, or spends nothing and
// refuses.
func (l *runtimeLimiter) take(id string, n int) error {
	if l == nil {
		return nil
	}
	return l.refusal(n, l.buckets.Take(id, n))
}

func (l *runtimeLimiter) takeAt(id string, n int, now time.Time) error {
	if l == nil {
		return nil
	}
	return l.refusal(n, l.buckets.TakeAt(id, n, now))
}

// refusal is the answer to a take of n events that must wait.
func (l *runtimeLimiter) refusal(n int, wait time.Duration) error {
	if wait == 0 {
		return nil
	}
	every, burst := l.buckets.Rate(), l.buckets.Burst()
	if n > burst {
		// Never admissible, however long the workload waits: say so
		// rather than answer 429 for ever.
		return errdefs.Invalid("runtime_event_batch_too_large",
			"this batch has %d events; this server takes at most %d at once from one instance (--runtime-event-burst); send smaller batches", n, burst)
	}
	secs := ratelimit.RetryAfterSeconds(wait) // nothing of a refused batch is spent, nor written
	return errdefs.RateLimited("runtime_events_rate_limited", secs, map[string]any{"events": n},
		"this instance reported more runtime events than this server takes (%g a second, bursts of %d); nothing of this batch was recorded: "+
			"retry it in %ds, and report less often or in smaller batches", every, burst, secs)
}
