package artifacts

import (
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/ratelimit"
)

// Credential-unwrap limits (the server's defaults; see --unwrap-rate and
// --unwrap-burst).
const (
	// DefaultUnwrapRate is the unwraps per second one principal may make,
	// sustained. A publisher unwraps once per publish intent and a node
	// once per image it pulls: 2 a second is 120 pulls a minute per node.
	DefaultUnwrapRate = 2
	// DefaultUnwrapBurst is how many unwraps one principal may make at
	// once: a node starting a full batch of tasks (32), each pulling its
	// image, with room to spare.
	DefaultUnwrapBurst = 60
	// maxLimitedUnwrappers bounds the limiter's memory; past it, the
	// principal quiet the longest is forgotten.
	maxLimitedUnwrappers = 100_000
)

// takeUnwrap spends one unwrap of the caller's budget, or refuses. It is
// keyed by the principal, not by the wrapping token: a caller can send a
// new token with every request for free. Signing in again gives the same
// principal and the same budget; more budget takes another identity (an
// account, a service account, which a project admin can create, audited,
// one budget each, or a node joined with a join token). So the limit
// bounds the unwraps one identity makes, and the database work one
// attacker causes grows only with the identities they hold. Each unwrap
// taken is a transaction and an audit row, whether its token works or is
// refused (409), so both spend the budget; a refusal here (429) spends
// nothing (ratelimit.Keyed cancels the refused reservation), so a caller
// retrying after the Retry-After is not pushed further back. Per replica,
// like every limiter in this process.
func (s *Service) takeUnwrap(who string) error {
	wait := s.unwrapLimit.Take(who, 1)
	if wait == 0 {
		return nil
	}
	secs := ratelimit.RetryAfterSeconds(wait)
	return errdefs.RateLimited("unwrap_rate_limited", secs, nil,
		"this caller unwrapped more registry credentials than this server takes (%g a second, bursts of %d); nothing was unwrapped "+
			"and the wrapping token still works: send it again in %ds", s.unwrapLimit.Rate(), s.unwrapLimit.Burst(), secs)
}
