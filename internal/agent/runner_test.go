package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
)

// A slow task (an image pull that hangs) does not hold up a task of another
// instance; two tasks of one instance run one at a time, in order; a task
// delivered again while it is queued or running is not queued twice; at
// most the limit run at once.
func TestRunnerConcurrencyAndOrder(t *testing.T) {
	release := make(chan struct{})
	var (
		mu      sync.Mutex
		log     []string
		running int
		most    int
	)
	done := make(chan string, 16)
	r := newRunner(2, func(ctx context.Context, task nodeapi.Task) {
		mu.Lock()
		running++
		most = max(most, running)
		log = append(log, "start "+task.ID)
		mu.Unlock()
		if task.ID == "slow" {
			<-release
		}
		mu.Lock()
		running--
		log = append(log, "end "+task.ID)
		mu.Unlock()
		done <- task.ID
	})
	ctx := context.Background()
	r.Submit(ctx, nodeapi.Task{ID: "slow", InstanceID: "a", Kind: nodeapi.KindImagePull})
	r.Submit(ctx, nodeapi.Task{ID: "a-run", InstanceID: "a", Kind: nodeapi.KindContainerRun})
	r.Submit(ctx, nodeapi.Task{ID: "slow", InstanceID: "a", Kind: nodeapi.KindImagePull}) // re-delivered
	r.Submit(ctx, nodeapi.Task{ID: "b-run", InstanceID: "b", Kind: nodeapi.KindContainerRun})
	r.Submit(ctx, nodeapi.Task{ID: "verify", Kind: nodeapi.KindTeardownVerify})
	for _, want := range []string{"b-run", "verify"} {
		select {
		case got := <-done:
			if got != "b-run" && got != "verify" {
				t.Fatalf("%s finished while the slow pull of its instance still runs", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s is blocked behind the slow task of another instance", want)
		}
	}
	close(release)
	for _, want := range []string{"slow", "a-run"} {
		select {
		case got := <-done:
			if got != want {
				t.Fatalf("instance a ran %s before %s", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never ran", want)
		}
	}
	r.Wait()
	mu.Lock()
	defer mu.Unlock()
	if most > 2 {
		t.Fatalf("%d tasks ran at once, limit 2", most)
	}
	var slowEnd, aStart, starts int
	for i, l := range log {
		switch l {
		case "end slow":
			slowEnd = i
		case "start a-run":
			aStart = i
		}
		if l[:5] == "start" {
			starts++
		}
	}
	if aStart < slowEnd || starts != 4 {
		t.Fatalf("order %v", log)
	}
}

// Shutting down drops what waits (the server re-delivers it) and Wait returns.
func TestRunnerStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	r := newRunner(1, func(ctx context.Context, task nodeapi.Task) {
		close(started)
		<-ctx.Done()
	})
	r.Submit(ctx, nodeapi.Task{ID: "one", InstanceID: "a"})
	r.Submit(ctx, nodeapi.Task{ID: "two", InstanceID: "a"})
	<-started
	cancel()
	r.Wait()
	if len(r.pending) != 0 || len(r.queues) != 0 {
		t.Fatalf("left %v %v", r.pending, r.queues)
	}
}
