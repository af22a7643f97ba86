package storage

import (
	"context"
	"time"
)

// IdempotencyState is where a keyed request stands.
type IdempotencyState string

const (
	// IdempotencyInFlight: the request holds the key and is running.
	IdempotencyInFlight IdempotencyState = "in_flight"
	// IdempotencyComplete: its answer is stored; every retry gets it.
	IdempotencyComplete IdempotencyState = "complete"
)

// IdempotencyRecord remembers the outcome of one keyed request so a retry
// gets the same answer instead of a second side effect.
type IdempotencyRecord struct {
	Principal   string
	Key         string
	Method      string
	Path        string
	RequestHash string
	// GrantsHash is the caller's iam.Grants fingerprint when the key was
	// claimed; the stored outcome is shown again only under the same one.
	GrantsHash  string
	State       IdempotencyState
	StatusCode  int
	Body        []byte
	ContentType string
	// Headers are the response headers a replay repeats, by name (which
	// ones is the HTTP edge's choice); nil when there were none, and for
	// records from before they were kept.
	Headers   map[string]string
	CreatedAt time.Time
	ExpiresAt time.Time
	// ClaimID names the request that holds the key; only its transaction
	// may commit under the key.
	ClaimID string
	// CommittedAt is set, in the mutation's own transaction, when the
	// request's change committed: from then on the change is never run
	// again for this key, even if the answer was lost.
	CommittedAt time.Time
	// ResourceType and ResourceID are what the committed change audited.
	ResourceType string
	ResourceID   string
}

// AbandonedAfter is how long an in-flight claim whose transaction has not
// committed may stand before it is taken as abandoned — the replica serving
// it died or lost its database — and a retry may claim the key again. Safe
// to keep short: a taken-over request can no longer commit.
const AbandonedAfter = time.Minute

// IdempotencyClaim is the key a request holds, carried in its context so
// that Mutate records the commit in the mutation's own transaction.
type IdempotencyClaim struct {
	Principal, Key, ClaimID string
}

type idemClaimKey struct{}

// WithIdempotencyClaim returns ctx carrying c.
func WithIdempotencyClaim(ctx context.Context, c IdempotencyClaim) context.Context {
	return context.WithValue(ctx, idemClaimKey{}, c)
}

// IdempotencyClaimFrom returns the claim ctx carries, if any.
func IdempotencyClaimFrom(ctx context.Context) (IdempotencyClaim, bool) {
	c, ok := ctx.Value(idemClaimKey{}).(IdempotencyClaim)
	return c, ok
}
