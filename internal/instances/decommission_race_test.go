package instances_test

import (
	"sync"
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// Decommissioning twice is harmless, also when the two requests come at
// once: the one that loses the race for the instance answers with the
// winner's operation, not 409 operation_in_progress.
func TestConcurrentDecommissionsAnswerOneOperation(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		// A few rounds: the race is the scheduler's to lose.
		for range 5 {
			inst, _, err := f.svc.Create(f.ctx, f.g, f.project.ID, instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: "echo"})
			must(t, err)
			f.drive(t)
			f.q.complete(t, nodeapi.TaskResult{})
			f.drive(t)
			if got := f.get(t, inst.ID).Status; got != instances.StatusRunning {
				t.Fatalf("before decommission: %s", got)
			}
			const n = 8
			ops, errs := make([]string, n), make([]error, n)
			var start, done sync.WaitGroup
			start.Add(1)
			for i := range n {
				done.Add(1)
				go func() {
					defer done.Done()
					start.Wait()
					_, op, err := f.svc.Decommission(f.ctx, f.g, f.project.ID, inst.ID)
					ops[i], errs[i] = op.ID, err
				}()
			}
			start.Done()
			done.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("decommission %d of %d at once: %v", i+1, n, errs[i])
				}
				if ops[i] != ops[0] {
					t.Fatalf("decommissions at once answered operations %v; want one", ops)
				}
			}
			if got := f.get(t, inst.ID); got.Status != instances.StatusDecommissioning || got.CurrentOperationID != ops[0] {
				t.Fatalf("after: %s, operation %s, want decommissioning by %s", got.Status, got.CurrentOperationID, ops[0])
			}
		}
	})
}
