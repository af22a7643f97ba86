package agent

import (
	"context"
	"sync"

	"github.com/gpuaas/gpuaas/client/nodeapi"
)

// DefaultConcurrency is how many tasks an agent runs at once by default.
const DefaultConcurrency = 4

// runner executes tasks with bounded concurrency while keeping the tasks of
// one workload in order: tasks with the same key (the instance id; the task
// id for a task of no instance) run one after another in the order they
// were submitted, tasks of different keys run side by side, at most `limit`
// at a time. A task already queued or running is not queued again (the
// server re-delivers a task whose lease ran out while it waited here).
type runner struct {
	run   func(ctx context.Context, t nodeapi.Task)
	slots chan struct{}

	mu      sync.Mutex
	queues  map[string][]nodeapi.Task // per key, waiting behind the running one
	pending map[string]bool           // task ids queued or running
	wg      sync.WaitGroup
}

func newRunner(limit int, run func(ctx context.Context, t nodeapi.Task)) *runner {
	if limit <= 0 {
		limit = DefaultConcurrency
	}
	return &runner{run: run, slots: make(chan struct{}, limit), queues: map[string][]nodeapi.Task{}, pending: map[string]bool{}}
}

func taskKey(t nodeapi.Task) string {
	if t.InstanceID != "" {
		return "instance/" + t.InstanceID
	}
	return "task/" + t.ID
}

// Submit queues t behind the tasks of its workload; it never blocks.
func (r *runner) Submit(ctx context.Context, t nodeapi.Task) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending[t.ID] {
		return
	}
	r.pending[t.ID] = true
	k := taskKey(t)
	q, busy := r.queues[k]
	r.queues[k] = append(q, t)
	if busy {
		return // the workload's goroutine picks it up after the tasks before it
	}
	r.wg.Add(1)
	go r.drain(ctx, k)
}

// drain runs the tasks of one key in order, each in a free slot.
func (r *runner) drain(ctx context.Context, k string) {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		q := r.queues[k]
		if len(q) == 0 || ctx.Err() != nil {
			for _, t := range q {
				delete(r.pending, t.ID) // shutting down: the leases run out and the server re-delivers
			}
			delete(r.queues, k)
			r.mu.Unlock()
			return
		}
		t := q[0]
		r.mu.Unlock()
		select {
		case r.slots <- struct{}{}:
			r.run(ctx, t)
			<-r.slots
		case <-ctx.Done():
		}
		r.mu.Lock()
		r.queues[k] = r.queues[k][1:]
		delete(r.pending, t.ID)
		r.mu.Unlock()
	}
}

// Wait returns once every submitted task has run or been dropped (after
// the context passed to Submit ends).
func (r *runner) Wait() { r.wg.Wait() }
