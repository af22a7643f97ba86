package nodes

import (
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/ratelimit"
)

// Node-agent request limits (the server's defaults; see
// --node-request-rate and --node-request-burst).
const (
	// DefaultNodeRequestRate is the requests per second one node may make
	// to each of its endpoints (heartbeat, task poll, task result),
	// sustained. An agent beats every HeartbeatTTL/3 (3.3 s by default),
	// long-polls once per batch of up to 32 tasks or per poll wait (60 s),
	// and reports one result per task: well under one request a second.
	DefaultNodeRequestRate = 20
	// DefaultNodeRequestBurst is how many requests one node may make to
	// one endpoint at once: the results of a node's worth of tasks
	// finishing together, and the retries of an agent coming back.
	DefaultNodeRequestBurst = 200
	// maxLimitedNodeEndpoints bounds the limiter's memory (three
	// endpoints of each node); past it, the one quiet the longest is
	// forgotten.
	maxLimitedNodeEndpoints = 30_000
)

// takeRequest spends one request of node id's budget for endpoint, or
// refuses. Each endpoint has a bucket of its own, so a flood of results
// never holds back the heartbeats that keep the node alive. It is taken
// after the node is authenticated (only the node spends its budget) and
// per replica.
func (s *Service) takeRequest(id, endpoint string) error {
	wait := s.requestLimit.Take(id+" "+endpoint, 1)
	if wait == 0 {
		return nil
	}
	secs := ratelimit.RetryAfterSeconds(wait)
	return errdefs.RateLimited("node_requests_rate_limited", secs, map[string]any{"endpoint": endpoint},
		"node %s made more %s requests than this server takes (%g a second, bursts of %d); nothing was done: retry in %ds",
		id, endpoint, s.requestLimit.Rate(), s.requestLimit.Burst(), secs)
}
