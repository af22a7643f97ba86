package instances

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/cloudevents"
	"github.com/gpuaas/gpuaas/internal/errdefs"
)

func TestParseRuntimeEvents(t *testing.T) {
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	beat := `{"specversion":"1.0","id":"b1","source":"//app","type":"heartbeat"}`
	evs, err := ParseRuntimeEvents([]byte(beat), false, now)
	if err != nil || len(evs) != 1 || evs[0].Type != RuntimeHeartbeat || !evs[0].Time.Equal(now) {
		t.Fatalf("a bare heartbeat: %+v %v", evs, err)
	}
	batch := `[{"specversion":"1.0","id":"m1","source":"//app","type":"member_failed","time":"2026-11-27T07:59:00Z",
		"data":{"member":"worker-3","role":"worker","reason":"gpu_xid_error","message":"Xid 79"}},
		{"specversion":"1.0","id":"b2","source":"//app","type":"heartbeat","data":{"health":"unhealthy","reason":"queue_full"}}]`
	evs, err = ParseRuntimeEvents([]byte(batch), true, now)
	if err != nil || len(evs) != 2 || evs[0].Member != "worker-3" || evs[0].Role != "worker" || evs[0].Reason != "gpu_xid_error" ||
		evs[1].Health != HealthUnhealthy {
		t.Fatalf("a batch: %+v %v", evs, err)
	}
	bad := []struct{ body, field string }{
		{`{"specversion":"1.0","id":"x","source":"s","type":"exploded"}`, "/type"},
		{`{"specversion":"1.0","id":"x","source":"s","type":"member_added"}`, "/data/member"},
		{`{"specversion":"1.0","id":"x","source":"s","type":"member_added","data":{"member":"w","role":"boss"}}`, "/data/role"},
		{`{"specversion":"1.0","id":"x","source":"s","type":"healthy","data":{"member":"w"}}`, "/data/member"},
		{`{"specversion":"1.0","id":"x","source":"s","type":"healthy","data":{"health":"healthy"}}`, "/data/health"},
		{`{"specversion":"1.0","id":"x","source":"s","type":"heartbeat","data":{"health":"degraded"}}`, "/data/health"},
		{`{"specversion":"1.0","id":"x","source":"s","type":"unhealthy","data":{"reason":"DROP TABLE"}}`, "/data/reason"},
		{`{"specversion":"1.0","id":"x","source":"s","type":"unhealthy","data":{"message":"a\u0000b"}}`, "/data/message"},
		{`{"specversion":"1.0","id":"x","source":"s","type":"heartbeat","data":{"cpu":99}}`, "/data"},
		{`{"specversion":"1.0","id":"x","source":"s","type":"heartbeat","data":"alive"}`, "/data"},
		{`{"specversion":"1.0","source":"s","type":"heartbeat"}`, "/id"},
	}
	for _, b := range bad {
		_, err := ParseRuntimeEvents([]byte(b.body), false, now)
		e, ok := errdefs.As(err)
		if !ok || e.Kind != errdefs.KindInvalidArgument || !strings.Contains(e.Message, b.field) {
			t.Errorf("%s: %v, want a refusal naming %s", b.body, err, b.field)
		}
	}
	many := "[" + strings.TrimSuffix(strings.Repeat(beat+",", MaxRuntimeBatch+1), ",") + "]"
	if _, err := ParseRuntimeEvents([]byte(many), true, now); err == nil {
		t.Error("an oversized batch was accepted")
	}
}

func TestHeartbeatHealth(t *testing.T) {
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		from   HealthState
		stated HealthState
		want   HealthState
	}{
		{HealthUnknown, "", HealthHealthy},
		{HealthDegraded, "", HealthHealthy},
		{HealthUnhealthy, "", HealthUnhealthy}, // the app said so; a heartbeat alone does not undo it
		{HealthHealthy, HealthUnhealthy, HealthUnhealthy},
		{HealthUnhealthy, HealthHealthy, HealthHealthy},
	} {
		h := Health{State: c.from, HeartbeatTimeoutSeconds: 30}
		heartbeat(&h, RuntimeEvent{Type: RuntimeHeartbeat, Health: c.stated}, now)
		if h.State != c.want || !h.LastHeartbeatAt.Equal(now) || !h.HeartbeatDueAt.Equal(now.Add(30*time.Second)) {
			t.Errorf("%s + heartbeat(%q): %+v, want %s", c.from, c.stated, h, c.want)
		}
	}
	h := Health{State: HealthHealthy}
	heartbeat(&h, RuntimeEvent{Type: RuntimeHeartbeat}, now)
	if !h.HeartbeatDueAt.IsZero() {
		t.Errorf("a version without a heartbeat timeout got a due time: %+v", h)
	}
}

// FuzzParseRuntimeEvents: whatever a workload sends, parsing answers with
// events or a client error, never a panic or an internal error, and every
// accepted event is one the rest of the platform can store.
func FuzzParseRuntimeEvents(f *testing.F) {
	f.Add([]byte(`{"specversion":"1.0","id":"b1","source":"s","type":"heartbeat"}`), false)
	f.Add([]byte(`[{"specversion":"1.0","id":"m","source":"s","type":"member_added","data":{"member":"w-1","role":"worker"}}]`), true)
	f.Add([]byte(`{"specversion":"1.0","id":"h","source":"s","type":"unhealthy","data":{"reason":"oom","message":"x"}}`), false)
	f.Add([]byte(`[]`), true)
	f.Add([]byte(`{"data":null,"type":"healthy"}`), false)
	now := time.Now()
	f.Fuzz(func(t *testing.T, body []byte, batch bool) {
		evs, err := ParseRuntimeEvents(body, batch, now)
		if err != nil {
			if e, ok := errdefs.As(err); !ok || e.Kind != errdefs.KindInvalidArgument {
				t.Fatalf("non-client error %v", err)
			}
			return
		}
		for _, ev := range evs {
			member := strings.HasPrefix(ev.Type, "member_")
			if ev.ID == "" || ev.Source == "" || !slices.Contains(RuntimeEventTypes, ev.Type) || !cloudevents.Printable(ev.ID) ||
				!cloudevents.Printable(ev.Message) || member != (ev.Member != "") || (ev.Reason != "" && !reasonPattern.MatchString(ev.Reason)) {
				t.Fatalf("accepted an invalid event %+v", ev)
			}
		}
	})
}

// The bucket refills at the rate: a refused batch spends nothing and says
// when the whole batch fits; a batch larger than the burst never fits.
func TestRuntimeLimiterRefills(t *testing.T) {
	l := newRuntimeLimiter(10, 20)
	at := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	if err := l.takeAt("i1", 15, at); err != nil {
		t.Fatal(err)
	}
	err := l.takeAt("i1", 10, at)
	e, ok := errdefs.As(err)
	if !ok || e.Kind != errdefs.KindRateLimited || e.Details["retry_after_seconds"] != 1 {
		t.Fatalf("10 events with 5 left: %v", err) // 5 more take half a second: retry in 1 s
	}
	if err := l.takeAt("i1", 10, at.Add(500*time.Millisecond)); err != nil {
		t.Fatalf("after the refill: %v", err)
	}
	if err := l.takeAt("i2", 20, at); err != nil {
		t.Fatalf("another instance's bucket: %v", err)
	}
	if e, ok := errdefs.As(l.takeAt("i3", 21, at)); !ok || e.Kind != errdefs.KindInvalidArgument {
		t.Fatalf("a batch larger than the burst: %v", e)
	}
	if newRuntimeLimiter(0, 0).takeAt("i1", MaxRuntimeBatch, at) != nil {
		t.Fatal("a rate of 0 limited")
	}
}

// reportedSince reaches back retentionOverlap from a UUIDv7, in the ids'
// own order: an id minted within the overlap before the newest one sorts
// at or after it, one minted earlier before it; anything that is not a
// UUIDv7 looks everywhere.
func TestReportedSince(t *testing.T) {
	at := func(ms int64) string {
		return fmt.Sprintf("%08x-%04x-7abc-8def-0123456789ab", uint64(ms)>>16, uint64(ms)&0xffff)
	}
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC).UnixMilli()
	since := reportedSince(at(now))
	if inside := at(now - retentionOverlap.Milliseconds() + 1); !(since <= inside) {
		t.Errorf("a row minted inside the overlap (%s) sorts before since %s", inside, since)
	}
	if outside := at(now - retentionOverlap.Milliseconds() - 1); !(outside < since) {
		t.Errorf("a row minted before the overlap (%s) sorts at or after since %s", outside, since)
	}
	for _, bad := range []string{"", "not-a-uuid", "zzzzzzzz-zzzz"} {
		if got := reportedSince(bad); got != "" {
			t.Errorf("reportedSince(%q) = %q, want everywhere", bad, got)
		}
	}
}

// reportedSince reads a UUIDv7's time as the hand-parsing it replaced did
// (the expected values are that parser's answers), and an id of another
// version, whose leading bits are no time, looks everywhere.
func TestReportedSinceKnownIDs(t *testing.T) {
	for id, want := range map[string]string{
		"017f22e2-79b0-7cc3-98c4-dc0c0c07398f": "017f22d9-51f0-0000-0000-000000000000", // RFC 9562's example
		"0193a0c4-5e00-7000-8000-000000000000": "0193a0bb-3640-0000-0000-000000000000",
		"00000000-0005-7000-8000-000000000000": "00000000-0000-0000-0000-000000000000", // younger than the overlap
		"ffffffff-ffff-7fff-bfff-ffffffffffff": "fffffff6-d83f-0000-0000-000000000000",
		"f47ac10b-58cc-4372-a567-0e02b2c3d479": "", // a UUIDv4
		"1ec9414c-232a-6b00-b3c8-9f6bdeced846": "", // a UUIDv6
	} {
		if got := reportedSince(id); got != want {
			t.Errorf("reportedSince(%s) = %q, want %q", id, got, want)
		}
	}
}
