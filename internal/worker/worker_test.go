package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestPeriodicRunsKicksAndStops(t *testing.T) {
	var n atomic.Int64
	p := &Periodic{Name: "t", Interval: time.Hour, Run: func(ctx context.Context) error {
		if n.Add(1) == 2 {
			panic("second run panics; the worker must survive")
		}
		return errors.New("runs may fail")
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := p.WaitRuns(ctx, 1); err != nil { // the first run is immediate
		t.Fatal(err)
	}
	p.Kick()
	if err := p.WaitRuns(ctx, 2); err != nil {
		t.Fatal(err)
	}
	p.Kick()
	if err := p.WaitRuns(ctx, 3); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	p.Stop()
	if got := n.Load(); got != 3 {
		t.Fatalf("runs = %d, want 3 (an hourly ticker never fired; only kicks)", got)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if err := p.WaitRuns(short, 4); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitRuns on a stopped worker: %v", err)
	}
}

func TestPeriodicTimeoutBoundsARun(t *testing.T) {
	got := make(chan error, 1)
	p := &Periodic{Name: "slow", Interval: time.Hour, Timeout: 20 * time.Millisecond, Run: func(ctx context.Context) error {
		<-ctx.Done()
		select {
		case got <- ctx.Err():
		default:
		}
		return ctx.Err()
	}}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	select {
	case err := <-got:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("run ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("per-run timeout never fired")
	}
}

func TestJitteredStaysInBounds(t *testing.T) {
	for range 1000 {
		d := Jittered(time.Second, 0.2)
		if d < 800*time.Millisecond || d > 1200*time.Millisecond {
			t.Fatalf("jittered = %v", d)
		}
	}
}
