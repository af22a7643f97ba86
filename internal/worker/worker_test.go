package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
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

// A recovered panic must leave its value and stack in the log, or the bug
// behind it cannot be found.
func TestPanicIsLoggedWithValueAndStack(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(b)
	}), nil))
	p := &Periodic{Name: "t", Interval: time.Hour, Logger: log, Run: func(context.Context) error {
		panic("boom-4711")
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitRuns(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	mu.Lock()
	defer mu.Unlock()
	if out := buf.String(); !strings.Contains(out, "boom-4711") || !strings.Contains(out, "worker_test.go") {
		t.Fatalf("the panic's value or stack is missing from the log:\n%s", out)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// A Start that races a Stop must not begin a second loop while the old run
// is still going: one job's runs never overlap.
func TestStartDuringStopNeverOverlapsRuns(t *testing.T) {
	var active, most atomic.Int64
	release := make(chan struct{})
	p := &Periodic{Name: "t", Interval: time.Hour, Run: func(context.Context) error {
		n := active.Add(1)
		defer active.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release // a run slow to notice its cancellation
		return nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for active.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	wg.Go(p.Stop)
	time.Sleep(20 * time.Millisecond) // let Stop take the old loop down
	wg.Go(func() {
		if err := p.Start(ctx); err != nil {
			t.Error(err)
		}
	})
	time.Sleep(50 * time.Millisecond) // a wrongly started loop runs at once
	overlapped := most.Load() > 1
	close(release)
	wg.Wait()
	p.Stop()
	if overlapped {
		t.Fatal("a Start during Stop ran the job while the old run was still going")
	}
}

// A job that panics on every run is not run again at once, kicked or not:
// it would fill the log with stacks and spin a core. A kick in the wait is
// not lost: the job runs when the wait is over.
func TestPanickingJobBacksOff(t *testing.T) {
	var mu sync.Mutex
	var at []time.Time
	p := &Periodic{Name: "t", Interval: time.Millisecond, Run: func(context.Context) error {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		panic("always")
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if err := p.WaitRuns(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		p.Kick()
		time.Sleep(2 * time.Millisecond)
	}
	if err := p.WaitRuns(ctx, 3); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, want := range []time.Duration{PanicBackoff(1), PanicBackoff(2)} {
		if gap := at[i+1].Sub(at[i]); gap < want {
			t.Fatalf("run %d came %v after a panicking run %d, want at least %v", i+2, gap, i+1, want)
		}
	}
}

func TestPanicBackoffDoublesToAMinute(t *testing.T) {
	want := []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	for n, w := range want {
		if got := PanicBackoff(n); got != w {
			t.Errorf("PanicBackoff(%d) = %v, want %v", n, got, w)
		}
	}
	if got := PanicBackoff(1 << 20); got != time.Minute {
		t.Errorf("PanicBackoff(huge) = %v", got)
	}
}

// OnStart runs in every Start (not a repeated one), before that start's
// first run, and never while a run of the job is in progress.
func TestOnStartRunsBeforeEachStartsFirstRun(t *testing.T) {
	var log []string // written by OnStart and Run, which never overlap
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	p := &Periodic{Name: "t", Interval: time.Hour, OnStart: func() { note("start") }, Run: func(context.Context) error { note("run"); return nil }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := uint64(1); i <= 2; i++ {
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil { // already started: no OnStart
			t.Fatal(err)
		}
		if err := p.WaitRuns(ctx, i); err != nil {
			t.Fatal(err)
		}
		p.Stop()
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(log, " "); got != "start run start run" {
		t.Fatalf("OnStart and runs happened as %q, want %q", got, "start run start run")
	}
}
