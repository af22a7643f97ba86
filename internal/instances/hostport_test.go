package instances_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A node carries allocations of several tenants: a launch refused because
// its host port is held there names the holder only when it is the
// project's own instance, never another tenant's.
func TestHostPortRefusalHidesOtherTenantsInstance(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		f := newFixture(t, d)
		q := f.db.Queries()
		now := time.Now()
		org := iam.Org{ID: iam.NewID(), Slug: "globex", Name: "Globex", CreatedAt: now}
		must(t, q.CreateOrg(f.ctx, org))
		theirs := iam.Project{ID: iam.NewID(), OrgID: org.ID, Slug: "research", Name: "Research", CreatedAt: now}
		must(t, q.CreateProject(f.ctx, theirs))
		f.allocs.list = append(f.allocs.list, instances.Allocation{ID: iam.NewID(), OrgID: org.ID, ProjectID: theirs.ID, NodeID: "node-1",
			Shape: "gpu_slice", State: "active", GPUUUIDs: []string{"GPU-z"}, NodeState: "ready",
			Inventory: nodeapi.Inventory{GPUs: []nodeapi.GPU{{UUID: "GPU-z", Model: "NVIDIA H100 80GB HBM3", Vendor: "nvidia"}}}})
		enabled := true
		_, err := f.cat.PutEntitlement(f.ctx, f.g, theirs.ID, "echo", catalog.EntitlementInput{Enabled: &enabled})
		must(t, err)
		port := 30000
		launch := func(projectID, name string) (instances.AppInstance, error) {
			inst, _, err := f.svc.Create(f.ctx, f.g, projectID, instances.CreateInput{AppSlug: "echo", Version: "1.0.0", DisplayName: name,
				Resources: catalog.ResourceRequest{HostPort: &port}})
			return inst, err
		}
		other, err := launch(theirs.ID, "theirs")
		must(t, err)
		_, err = launch(f.project.ID, "ours")
		msg := fieldMessage(err)
		if !strings.Contains(msg, "host port 30000") {
			t.Fatalf("a launch on a port another tenant's instance holds: %v (%s)", err, msg)
		}
		if strings.Contains(msg, other.ID) {
			t.Fatalf("the refusal names another tenant's instance %s: %s", other.ID, msg)
		}
		// The project's own holder is still named.
		port = 30001
		mine, err := launch(f.project.ID, "mine")
		must(t, err)
		if _, err = launch(f.project.ID, "again"); err == nil || !strings.Contains(fieldMessage(err), mine.ID) {
			t.Fatalf("a launch on a port the project's own instance holds: %v", err)
		}
	})
}

func fieldMessage(err error) string {
	e, ok := errdefs.As(err)
	if !ok {
		return ""
	}
	fs, _ := e.Details["fields"].([]errdefs.FieldError)
	var out []string
	for _, f := range fs {
		out = append(out, f.Message)
	}
	return strings.Join(out, "; ")
}
