package errdefs

import "testing"

// A rate-limit refusal carries its wait under RetryAfterDetail (what the
// transport turns into Retry-After) beside the caller's own details, which
// cannot take that key's place.
func TestRateLimited(t *testing.T) {
	e := RateLimited("slow_down", 7, map[string]any{"events": 3}, "wait %ds", 7)
	if e.Kind != KindRateLimited || e.Code != "slow_down" || e.Message != "wait 7s" {
		t.Fatalf("got %+v", e)
	}
	if e.Details[RetryAfterDetail] != 7 || e.Details["events"] != 3 || len(e.Details) != 2 {
		t.Fatalf("details %v", e.Details)
	}
	if d := RateLimited("x", 1, nil, "x").Details; len(d) != 1 || d[RetryAfterDetail] != 1 {
		t.Fatalf("without details: %v", d)
	}
	if d := RateLimited("x", 2, map[string]any{RetryAfterDetail: "soon"}, "x").Details; d[RetryAfterDetail] != 2 {
		t.Fatalf("a detail replaced the wait: %v", d)
	}
}
