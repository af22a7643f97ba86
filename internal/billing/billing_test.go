package billing

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/cloudevents"
	"github.com/gpuaas/gpuaas/internal/errdefs"
)

func TestAmountRoundsHalfUpWithoutOverflow(t *testing.T) {
	cases := []struct{ q, p, per, want int64 }{
		{3600, 2_500_000, 3600, 2_500_000}, // one GPU-hour at 2.50
		{1, 2_500_000, 3600, 694},          // one GPU-second: 694.44 → 694
		{1, 1_800, 3600, 1},                // 0.5 rounds up
		{0, 9, 1, 0},
		{1_000_000_000_000_000, 9_000, 1_000_000, 9_000_000_000_000}, // intermediate above 2^63
	}
	for _, c := range cases {
		got, err := Amount(c.q, c.p, c.per)
		if err != nil || got != c.want {
			t.Errorf("Amount(%d, %d, %d) = %d, %v; want %d", c.q, c.p, c.per, got, err, c.want)
		}
	}
	if _, err := Amount(1<<62, 1<<40, 1); err == nil {
		t.Error("an amount beyond 64 bits was not refused")
	}
}

func TestSlicesCoverEverySecondOnce(t *testing.T) {
	h := time.Hour
	start := time.Date(2026, 11, 23, 7, 40, 12, 900_000_000, time.UTC)
	end := time.Date(2026, 11, 23, 10, 5, 3, 0, time.UTC)
	// Closed interval: the whole of it, cut at hour boundaries.
	sl := Slices(start, end, end.Add(time.Minute), h)
	var total time.Duration
	for i, s := range sl {
		total += s.End.Sub(s.Start)
		if i > 0 && !s.Start.Equal(sl[i-1].End) {
			t.Fatalf("gap or overlap between slices %d and %d", i-1, i)
		}
	}
	if want := end.Sub(start.Truncate(time.Second)); total != want || len(sl) != 4 || !sl[3].Final {
		t.Fatalf("slices %v: total %v, want %v in 4 slices, last final", sl, total, want)
	}
	// Open interval: only slices that have fully passed, and the same
	// slices again when it later closes (so the keys match).
	open := Slices(start, time.Time{}, time.Date(2026, 11, 23, 9, 30, 0, 0, time.UTC), h)
	if len(open) != 2 || open[1].Final {
		t.Fatalf("open slices %v", open)
	}
	for i := range open {
		if !open[i].Start.Equal(sl[i].Start) || !open[i].End.Equal(sl[i].End) {
			t.Fatalf("open slice %d %v differs from closed %v", i, open[i], sl[i])
		}
	}
	rest := Slices(open[1].End, end, end, h)
	if len(rest) != 2 || !rest[0].Start.Equal(sl[2].Start) {
		t.Fatalf("resumed slices %v", rest)
	}
}

func TestParseUsageEvents(t *testing.T) {
	now := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	ok := `{"specversion":"1.0","id":"e1","source":"//app/i1","type":"gpuaas.usage.v1","time":"2026-11-23T07:59:00Z","data":{"usage_unit":"tokens","quantity":42}}`
	evs, err := ParseUsageEvents([]byte(ok), false, now)
	if err != nil || len(evs) != 1 || evs[0].Quantity != 42 || evs[0].UsageUnit != "tokens" || !evs[0].StartTime.Equal(evs[0].Time) {
		t.Fatalf("single: %+v %v", evs, err)
	}
	evs, err = ParseUsageEvents([]byte("["+ok+","+ok+"]"), true, now)
	if err != nil || len(evs) != 2 {
		t.Fatalf("batch: %+v %v", evs, err)
	}
	bad := []struct{ body, field string }{
		{`{"specversion":"0.3","id":"e","source":"s","type":"t","data":{"usage_unit":"tokens","quantity":1}}`, "/specversion"},
		{`{"specversion":"1.0","source":"s","type":"t","data":{"usage_unit":"tokens","quantity":1}}`, "/id"},
		{`{"specversion":"1.0","id":"e","source":"s","type":"t","data":{"usage_unit":"tokens","quantity":1.5}}`, "/data/quantity"},
		{`{"specversion":"1.0","id":"e","source":"s","type":"t","data":{"usage_unit":"tokens","quantity":-1}}`, "/data/quantity"},
		{`{"specversion":"1.0","id":"e","source":"s","type":"t","data":{"quantity":1}}`, "/data/usage_unit"},
		{`{"specversion":"1.0","id":"e","source":"s","type":"t","time":"yesterday","data":{"usage_unit":"tokens","quantity":1}}`, "/time"},
		{`{"specversion":"1.0","id":"e","source":"s","type":"t","data":"tokens"}`, "/data"},
		{`{"specversion":"1.0","id":"e\u0000","source":"s","type":"t","data":{"usage_unit":"tokens","quantity":1}}`, "/id"},
		{`{"specversion":"1.0","id":"e","source":"s\n","type":"t","data":{"usage_unit":"tokens","quantity":1}}`, "/source"},
		{`{"specversion":"1.0","id":"e","source":"s","type":"t","data":{"usage_unit":"tokens","quantity":"1"}}`, "/data/quantity"},
		{`{"specversion":"1.0","id":"e","source":"s","type":"t","data":{"usage_unit":"tokens","quantity":1000000000001}}`, "/data/quantity"},
		{`{"specversion":"1.0","id":"e","source":"s","type":"t","data":{"usage_unit":"tokens","quantity":99999999999999999999}}`, "/data/quantity"},
	}
	for _, b := range bad {
		_, err := ParseUsageEvents([]byte(b.body), false, now)
		e, isErr := errdefs.As(err)
		if !isErr || e.Kind != errdefs.KindInvalidArgument || !strings.Contains(e.Message, b.field) {
			t.Errorf("%s: got %v, want a refusal naming %s", b.body, err, b.field)
		}
	}
	if _, err := ParseUsageEvents([]byte("["+ok+"]"), false, now); err == nil {
		t.Error("an array sent as a single event was accepted")
	}
}

// FuzzParseUsageEvents: whatever a workload sends, parsing answers with
// events or a client error, never a panic or an internal error.
func FuzzParseUsageEvents(f *testing.F) {
	f.Add([]byte(`{"specversion":"1.0","id":"e1","source":"s","type":"t","data":{"usage_unit":"tokens","quantity":1}}`), false)
	f.Add([]byte(`[{"specversion":"1.0","id":"e1","source":"s","type":"t","data":{"usage_unit":"requests","quantity":9,"start_time":"2026-01-01T00:00:00Z"}}]`), true)
	f.Add([]byte(`[]`), true)
	f.Add([]byte(`{"data":{"quantity":1e400}}`), false)
	f.Add([]byte(`{"specversion":"1.0","id":"e\u0000","source":"s","type":"t","data":{"usage_unit":"tokens","quantity":"7"}}`), false)
	now := time.Now()
	f.Fuzz(func(t *testing.T, body []byte, batch bool) {
		evs, err := ParseUsageEvents(body, batch, now)
		if err != nil {
			if e, ok := errdefs.As(err); !ok || e.Kind != errdefs.KindInvalidArgument {
				t.Fatalf("non-client error %v", err)
			}
			return
		}
		for _, ev := range evs {
			if ev.ID == "" || ev.Source == "" || ev.UsageUnit == "" || ev.Quantity < 0 || ev.Quantity > MaxQuantity ||
				ev.StartTime.After(ev.Time) || !cloudevents.Printable(ev.ID) || !cloudevents.Printable(ev.Source) {
				t.Fatalf("accepted an invalid event %+v", ev)
			}
		}
	})
}
