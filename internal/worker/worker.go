// Package worker is the one contract every background job of gpuaas follows:
// the outbox relay, node liveness, instance reconcilers, metering. A job is a
// Service (Start/Stop, idempotent, context-cancelled); most are a Periodic,
// which runs a function on a jittered ticker with a per-run timeout, can be
// kicked to run at once, and lets a test wait for runs instead of sleeping.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"
)

// Service is a background job with a lifecycle.
type Service interface {
	// Start launches the job and returns at once. Starting a started
	// service is a no-op. The job runs until ctx is cancelled or Stop.
	Start(ctx context.Context) error
	// Stop cancels the job and waits for it to return. Stopping a stopped
	// (or never started) service is a no-op.
	Stop()
}

// Periodic runs Run every Interval, give or take Jitter, each run bounded by
// Timeout. Kick asks for a run now (coalesced with one already pending).
type Periodic struct {
	Name     string
	Interval time.Duration
	Jitter   float64       // fraction of Interval, 0..1; default 0.1
	Timeout  time.Duration // per run; default Interval (at least 1s)
	Run      func(ctx context.Context) error
	Logger   *slog.Logger
	// OnStart, when set, runs in every Start, before that start's first
	// run: a job that judges only what it saw while running (node
	// liveness) forgets there what it saw before a Stop.
	OnStart func()

	// life serialises Start and Stop: a Start racing a Stop waits until the
	// old loop has returned, so two runs of one job never overlap.
	life    sync.Mutex
	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	kick    chan struct{}
	runs    uint64
	runCond *sync.Cond
}

// Start implements Service.
func (p *Periodic) Start(ctx context.Context) error {
	if p.Run == nil || p.Interval <= 0 {
		return errors.New("worker: periodic job needs Run and a positive Interval")
	}
	p.life.Lock()
	defer p.life.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		return nil
	}
	if p.runCond == nil {
		p.runCond = sync.NewCond(&p.mu)
	}
	if p.kick == nil {
		p.kick = make(chan struct{}, 1)
	}
	if p.OnStart != nil {
		p.OnStart() // no loop runs: Stop waited for the last one
	}
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	go p.loop(ctx, p.done)
	return nil
}

// Stop implements Service.
func (p *Periodic) Stop() {
	p.life.Lock()
	defer p.life.Unlock()
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.cancel, p.done = nil, nil
	p.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Kick asks for a run as soon as the current one (if any) ends.
func (p *Periodic) Kick() {
	p.mu.Lock()
	if p.kick == nil {
		p.kick = make(chan struct{}, 1)
	}
	k := p.kick
	p.mu.Unlock()
	select {
	case k <- struct{}{}:
	default:
	}
}

// Runs reports how many runs have completed (successfully or not).
func (p *Periodic) Runs() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

// WaitRuns blocks until at least n runs have completed or ctx ends: the test
// hook that replaces sleeping.
func (p *Periodic) WaitRuns(ctx context.Context, n uint64) error {
	p.mu.Lock()
	if p.runCond == nil {
		p.runCond = sync.NewCond(&p.mu)
	}
	p.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.runCond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.runs < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		p.runCond.Wait()
	}
	return nil
}

func (p *Periodic) logger() *slog.Logger {
	l := p.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return l.With("worker", p.Name)
}

func (p *Periodic) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	log := p.logger()
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = max(p.Interval, time.Second)
	}
	timer := time.NewTimer(0) // first run at once
	defer timer.Stop()
	due := time.Now()
	panics := 0             // runs in a row that panicked
	var notBefore time.Time // after a panic: no run before this, kicked or not
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-p.kick:
			if wait := time.Until(notBefore); wait > 0 {
				// A kick after a panic runs the job once the backoff has
				// passed, not at once: it would likely panic again.
				if due.After(notBefore) {
					timer.Stop()
					timer.Reset(wait)
					due = notBefore
				}
				continue
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		// This run serves every kick before it; one arriving while it runs
		// stays for the next.
		select {
		case <-p.kick:
		default:
		}
		runCtx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		err := p.safeRun(runCtx)
		cancel()
		next := Jittered(p.Interval, p.Jitter)
		if pe, ok := errors.AsType[*PanicError](err); ok {
			panics++
			backoff := PanicBackoff(panics)
			notBefore, next = time.Now().Add(backoff), max(next, backoff)
			// Logged even while stopping, with the stack: a recovered panic
			// is a bug, and without where it happened nobody can fix it.
			log.ErrorContext(ctx, "run panicked", "error", err, "stack", string(pe.Stack), "duration", time.Since(start),
				"panics_in_a_row", panics, "next_run_in", next)
		} else {
			panics, notBefore = 0, time.Time{}
			if err != nil && ctx.Err() == nil {
				log.WarnContext(ctx, "run failed", "error", err, "duration", time.Since(start))
			}
		}
		p.mu.Lock()
		p.runs++
		p.runCond.Broadcast()
		p.mu.Unlock()
		due = time.Now().Add(next)
		timer.Reset(next)
	}
}

// PanicBackoff is the least wait before the next run after n runs in a row
// panicked: 1s, doubling, at most a minute. A job that panics on every run
// (the agent's task poll ticks every 10 ms) would otherwise fill the log
// with stacks and spin a core; it still runs again, since the cause may
// pass.
func PanicBackoff(n int) time.Duration {
	if n < 1 {
		return 0
	}
	return min(time.Second<<min(n-1, 6), time.Minute)
}

func (p *Periodic) safeRun(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return p.Run(ctx)
}

// PanicError reports a run that panicked; the worker survives it.
type PanicError struct {
	Value any
	Stack []byte // of the panicking goroutine, taken in the recover
}

func (e *PanicError) Error() string { return fmt.Sprintf("worker: run panicked: %v", e.Value) }

// Jittered returns d moved by up to ±frac of itself (frac 0 means 0.1), so
// replicas and agents started together do not tick in lockstep.
func Jittered(d time.Duration, frac float64) time.Duration {
	if frac <= 0 {
		frac = 0.1
	}
	if frac > 1 {
		frac = 1
	}
	span := float64(d) * frac
	return d + time.Duration((rand.Float64()*2-1)*span)
}

// Group starts and stops several services together, stopping in reverse.
type Group []Service

// Start starts each service; on failure it stops those already started.
func (g Group) Start(ctx context.Context) error {
	for i, s := range g {
		if err := s.Start(ctx); err != nil {
			Group(g[:i]).Stop()
			return err
		}
	}
	return nil
}

// Stop stops every service, last started first.
func (g Group) Stop() {
	for i := len(g) - 1; i >= 0; i-- {
		g[i].Stop()
	}
}
