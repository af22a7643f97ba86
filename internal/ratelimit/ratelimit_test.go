package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

var t0 = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

// A key starts with a full burst, spends n at a time, regains the rate,
// and a refusal spends nothing and says how long to wait.
func TestKeyedBurstRefillAndTakeN(t *testing.T) {
	k := New(10, 20, 100)
	if w := k.TakeAt("a", 15, t0); w != 0 {
		t.Fatalf("15 of a burst of 20: wait %v", w)
	}
	if w := k.TakeAt("a", 10, t0); w != 500*time.Millisecond {
		t.Fatalf("10 with 5 left at 10/s: wait %v, want 500ms", w)
	}
	// The refusal spent nothing: the same 5 are still there.
	if w := k.TakeAt("a", 5, t0); w != 0 {
		t.Fatalf("the 5 left after a refusal: wait %v", w)
	}
	if w := k.TakeAt("a", 10, t0.Add(time.Second)); w != 0 {
		t.Fatalf("after a second's refill: wait %v", w)
	}
	if w := k.TakeAt("b", 20, t0); w != 0 {
		t.Fatalf("another key's bucket: wait %v", w)
	}
	if w := k.TakeAt("c", 21, t0); w != rate.InfDuration {
		t.Fatalf("more than the burst: wait %v, want never", w)
	}
	// The bucket never holds more than the burst, however long it rests.
	if w := k.TakeAt("b", 20, t0.Add(time.Hour)); w != 0 {
		t.Fatalf("a rested bucket: wait %v", w)
	}
	if w := k.TakeAt("b", 1, t0.Add(time.Hour)); w != 100*time.Millisecond {
		t.Fatalf("a rested bucket held more than its burst: wait %v", w)
	}
}

func TestKeyedNilAndZeroRateTakeEverything(t *testing.T) {
	if New(0, 5, 10) != nil {
		t.Fatal("a rate of 0 built a limiter")
	}
	var k *Keyed
	if w := k.Take("a", 1_000_000); w != 0 {
		t.Fatalf("a nil limiter waits %v", w)
	}
}

// Take reads the clock it was handed, not the wall clock.
func TestKeyedReadsItsClock(t *testing.T) {
	now := t0
	k := New(1, 1, 10).WithClock(func() time.Time { return now })
	if k.Take("a", 1) != 0 || k.Take("a", 1) != time.Second {
		t.Fatal("a burst of 1 at 1/s")
	}
	now = now.Add(time.Second)
	if w := k.Take("a", 1); w != 0 {
		t.Fatalf("after the clock moved a second: wait %v", w)
	}
}

// The table holds at most maxKeys; a new key forgets the least recently
// used one (which starts again with a full bucket), and a key in use is
// kept.
func TestKeyedTableStaysBoundedAndForgetsTheLeastRecentlyUsed(t *testing.T) {
	k := New(0.001, 1, 3)
	k.TakeAt("busy", 1, t0)
	for i := range 10 {
		k.TakeAt(fmt.Sprint("k", i), 1, t0)
		k.TakeAt("busy", 1, t0) // refused, but used: it stays
		if n := k.Len(); n > 3 {
			t.Fatalf("%d keys tracked, want at most 3", n)
		}
	}
	if w := k.TakeAt("busy", 1, t0); w == 0 {
		t.Fatal("the key in use was forgotten and got a fresh bucket")
	}
	if w := k.TakeAt("k0", 1, t0); w != 0 {
		t.Fatalf("the least recently used key was not forgotten: wait %v", w)
	}
}

// Inserting past a full table must not walk it: 200,000 fresh keys
// against a full table of 100,000 take well under a second here, where a
// walk per insert would be 2·10^10 steps.
func TestKeyedFullTableInsertIsConstant(t *testing.T) {
	const n = 100_000
	k := New(1, 1, n)
	for i := range 3 * n {
		k.TakeAt(fmt.Sprint(i), 1, t0)
	}
	if k.Len() != n {
		t.Fatalf("%d keys, want %d", k.Len(), n)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for wait, want := range map[time.Duration]int{time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, 0: 1} {
		if got := RetryAfterSeconds(wait); got != want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", wait, got, want)
		}
	}
}
