package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A host port is held by one live instance per node: a second launch of
// the profile's default takes the next free port in its bounds (and keeps
// it on upgrade), a launch that names a held port is refused with the
// holder, and a decommissioned instance frees its port.
func TestHostPortReservedPerNode(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		manifest := withRuntimeProfile(echoManifest("web"), func(p map[string]any) {
			p["resources"].(map[string]any)["host_port"] = map[string]any{"default": 18000, "min": 18000, "max": 18001}
		})
		e := newInstanceEnv(t, d, "web", map[string]v1.Image{"1.0.0": nil, "2.0.0": nil}, manifest, 2)
		e.node.serve(t, okResult)
		launch := func(name string, port any) *servertest.Response {
			body := map[string]any{"app_slug": "web", "version": "1.0.0", "display_name": name}
			if port != nil {
				body["resources"] = map[string]any{"host_port": port}
			}
			return e.bot.Do("POST", e.path("/app-instances"), body)
		}
		running := func(r *servertest.Response) string {
			r.Want(t, 202)
			if op := waitOp(t, e.bot, e.pid, r.String("operation_id")); op.String("state") != "succeeded" {
				t.Fatalf("launch: %s", op.Body)
			}
			return r.String("id")
		}
		first := running(launch("first", nil))
		second := running(launch("second", nil))
		port := func(id string) int {
			return num(e.bot.Do("GET", e.path("/app-instances/"+id), nil).Want(t, 200), "resources.host_port")
		}
		if port(first) != 18000 || port(second) != 18001 {
			t.Fatalf("host ports %d and %d, want 18000 and 18001", port(first), port(second))
		}
		published := func(id string) (ports []int) { // what each run task asked the node to publish
			for _, task := range e.node.tasks() {
				var run nodeapi.ContainerRun
				if task.Kind == nodeapi.KindContainerRun && task.InstanceID == id && json.Unmarshal(task.Payload, &run) == nil && len(run.Ports) > 0 {
					ports = append(ports, run.Ports[0].Host)
				}
			}
			return ports
		}
		full := launch("third", nil)
		if full.Status != 400 || !strings.Contains(string(full.Body), "host_port_in_use") || !strings.Contains(string(full.Body), "18000–18001") {
			t.Fatalf("a launch with every port held: %d %s", full.Status, full.Body)
		}
		named := launch("named", 18000)
		if named.Status != 400 || !strings.Contains(string(named.Body), first) {
			t.Fatalf("a launch naming a held port: %d %s", named.Status, named.Body)
		}
		up := e.bot.Do("POST", e.path("/app-instances/"+second+"/upgrade"), map[string]any{"target_version": "2.0.0"}).Want(t, 202)
		if op := waitOp(t, e.bot, e.pid, up.String("operation_id")); op.String("state") != "succeeded" || port(second) != 18001 {
			t.Fatalf("upgrade: %s, port %d", op.Body, port(second))
		}
		if got := fmt.Sprint(published(second)); got != "[18001 18001]" {
			t.Fatalf("the second instance's deployments published %s, want 18001 each time", got)
		}
		dr := e.bot.Do("POST", e.path("/app-instances/"+first+"/decommission"), nil).Want(t, 202)
		waitOp(t, e.bot, e.pid, dr.String("operation_id"))
		if again := running(launch("again", 18000)); port(again) != 18000 {
			t.Fatalf("the freed port: %d", port(again))
		}
	})
}
