package clock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
)

func TestManual(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := clock.NewManual(start)
	if !c.Now().Equal(start) {
		t.Fatalf("now %v, want %v", c.Now(), start)
	}
	if got := c.Advance(90 * time.Second); !got.Equal(start.Add(90*time.Second)) || !c.Now().Equal(got) {
		t.Fatalf("advance: %v, now %v", got, c.Now())
	}
	c.Set(start)
	if !c.Now().Equal(start) {
		t.Fatalf("set: %v", c.Now())
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				c.Advance(time.Second)
				_ = c.Now()
			}
		}()
	}
	wg.Wait()
	if want := start.Add(800 * time.Second); !c.Now().Equal(want) {
		t.Fatalf("after concurrent advances: %v, want %v", c.Now(), want)
	}
}

func TestOr(t *testing.T) {
	if clock.Or(nil)().IsZero() {
		t.Fatal("Or(nil) is not the wall clock")
	}
	c := clock.NewManual(time.Unix(5, 0))
	if !clock.Or(c.Now)().Equal(time.Unix(5, 0)) {
		t.Fatal("Or(now) is not now")
	}
}
