package httpapi_test

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// Launch preview never passes what create refuses: a project operator who
// previews a launch that makes a shared instance (control_plane_scope
// tenant, or platform_managed) learns from launch_refusal that create
// answers 403, naming the role it needs; one who holds it gets no refusal.
func TestLaunchPreviewRefusesASharedLaunchAsCreateDoes(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		manifest := modesManifest("shared", []string{"tenant_dedicated", "platform_managed"}, []string{"project", "tenant", "platform"})
		e := newInstanceEnv(t, d, "shared", map[string]v1.Image{"1.0.0": nil}, manifest, 1)
		e.admin.Do("PUT", e.path("/apps/entitlements/shared"), map[string]any{"enabled": true}).Want(t, 200)
		e.admin.Do("PUT", "/api/v1/orgs/"+e.s.Creds.OrgID+"/apps/entitlements/shared", map[string]any{"enabled": true}).Want(t, 200)
		for _, c := range []struct {
			req  map[string]any
			code string
		}{
			{map[string]any{"control_plane_scope": "tenant"}, "org_role_required"},
			{map[string]any{"operating_mode": "platform_managed"}, "platform_role_required"},
		} {
			launch := map[string]any{"app_slug": "shared", "version": "1.0.0", "display_name": "shared"}
			for k, v := range c.req {
				launch[k] = v
			}
			if r := e.bot.Do("POST", e.path("/app-instances"), launch); r.Status != 403 || r.ErrorCode() != c.code {
				t.Fatalf("%v: create by the project operator: %d %s", c.req, r.Status, r.Body)
			}
			pv := e.bot.Do("POST", e.path("/apps/catalog/shared/versions/1.0.0/launch-preview"), c.req).Want(t, 200)
			ref, _ := pv.JSON["launch_refusal"].(map[string]any)
			if ref == nil || ref["status"] != float64(403) || ref["code"] != c.code {
				t.Fatalf("%v: create answers 403 %s, the operator's preview: %s", c.req, c.code, pv.Body)
			}
			if pv := e.admin.Do("POST", e.path("/apps/catalog/shared/versions/1.0.0/launch-preview"), c.req).Want(t, 200); pv.JSON["launch_refusal"] != nil {
				t.Fatalf("%v: the platform admin's preview: %s", c.req, pv.Body)
			}
		}
	})
}
