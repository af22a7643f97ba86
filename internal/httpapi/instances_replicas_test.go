package httpapi_test

import (
	"context"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/internal/agent/agenttest/fleet"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
)

// An instance created through replica A, whose instance driver is
// stopped, is driven to running by replica B's driver, which hears of the
// new operation and of the agent's task results over NATS: B's fallback
// look is a minute away, and the whole launch must finish well before.
// The agent long-polls replica B, so every step crosses replicas: the
// operation queued on A, the deploy task queued by B, the result posted
// to B.
func TestInstanceOperationOnOneReplicaWakesTheDriverOnAnother(t *testing.T) {
	t.Parallel()
	const fallback = time.Minute
	a, b := servertest.TwoReplicas(t, func(c *config.Config) { c.InstanceDriveInterval = fallback })
	a.App.Instances.Worker().Stop()

	// b's seeding reset the admin's password: set up through b.
	e := setupInstanceEnv(t, b, "echo", map[string]v1.Image{"1.0.0": nil}, echoManifest("echo"), -1)
	f := fleet.Start(t, b, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	f.Must(f.WaitReady(ctx))
	// B's driver has taken its first pass: from here it runs on notices
	// or, a minute later, its fallback.
	f.Must(b.App.Instances.Worker().WaitRuns(ctx, 1))

	alloc := e.admin.Do("POST", "/api/v1/admin/allocations", map[string]any{"project_id": e.pid, "gpu_count": 1, "sku": "test.1x",
		"node_id": f.Agents[0].NodeID}).Want(t, 201).String("id")
	start := time.Now()
	id := a.As(e.bot.Token).Do("POST", e.path("/app-instances"), map[string]any{"app_slug": "echo", "version": "1.0.0",
		"display_name": "across replicas", "target_allocation_id": alloc}).Want(t, 202).String("id")
	within, cancelWithin := context.WithTimeout(ctx, fallback/3)
	defer cancelWithin()
	if _, err := f.WaitInstance(within, e.pid, id, "running"); err != nil {
		t.Fatalf("an instance created on replica A is not running %s later (B's driver falls back to a look every %s): %v",
			time.Since(start).Round(time.Millisecond), fallback, err)
	}
	t.Logf("created on A, driven by B, running after %s", time.Since(start).Round(time.Millisecond))
}
