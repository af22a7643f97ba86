package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
)

const (
	manifestsPath = "/api/v1/admin/apps/manifests"
	rawCatalog    = "/api/v1/apps/catalog"
)

// bareApp declares no artifacts, so it can be published without an
// artifact registry.
const bareApp = `app:
  slug: bare-slurm
  display_name: Bare Slurm
  runtime_backend: slurm
  supported_modes:
    operating_modes: [tenant_dedicated]
    control_plane_scopes: [project, tenant]
version:
  version: 1.0.0
  config_schema:
    type: object
    additionalProperties: false
    properties:
      partition_name: {type: string, default: gpu}
`

func readExample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "manifests", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func yamlBody(c *servertest.Client, body string) *servertest.Response {
	return c.Do("POST", manifestsPath, []byte(body), "Content-Type", "application/yaml")
}

func adminVersionPath(slug, version, action string) string {
	return "/api/v1/admin/apps/catalog/" + slug + "/versions/" + version + "/" + action
}

func previewPath(projectID, slug, version string) string {
	return "/api/v1/projects/" + projectID + "/apps/catalog/" + slug + "/versions/" + version + "/launch-preview"
}

func entitlementPath(projectID, slug string) string {
	return "/api/v1/projects/" + projectID + "/apps/entitlements/" + slug
}

func projectCatalogSlugs(t *testing.T, c *servertest.Client, projectID string) map[string][]string {
	t.Helper()
	r := c.Do("GET", "/api/v1/projects/"+projectID+"/apps/catalog", nil).Want(t, 200)
	out := map[string][]string{}
	for _, it := range r.Items() {
		app := it["app"].(map[string]any)
		var vs []string
		for _, v := range it["versions"].([]any) {
			vs = append(vs, v.(map[string]any)["version"].(string))
		}
		out[app["slug"].(string)] = vs
	}
	return out
}

func versionStatuses(t *testing.T, c *servertest.Client, slug string) map[string]string {
	t.Helper()
	r := c.Do("GET", rawCatalog+"/"+slug+"/versions", nil).Want(t, 200)
	out := map[string]string{}
	for _, it := range r.Items() {
		out[it["version"].(string)] = it["status"].(string)
	}
	return out
}

func lastAudit(t *testing.T, s *servertest.Server, f store.AuditFilter) store.AuditEvent {
	t.Helper()
	evs, _, err := s.DB.Queries().ListAudit(context.Background(), f, store.Page{Limit: 1})
	if err != nil || len(evs) == 0 {
		t.Fatalf("no audit row for %+v (%v)", f, err)
	}
	return evs[0]
}

func jsonField(t *testing.T, raw []byte, key string) any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("audit state %s: %v", raw, err)
	}
	return m[key]
}

// member creates a user bound to role on project and returns its id and client.
func member(t *testing.T, s *servertest.Server, admin *servertest.Client, email, role, projectID string) (string, *servertest.Client) {
	t.Helper()
	uid, c := s.NewUser(admin, email)
	admin.Do("POST", "/api/v1/projects/"+projectID+"/members", map[string]string{"user_id": uid, "role": role}).Want(t, 201)
	return uid, c
}

func fieldErrors(t *testing.T, r *servertest.Response) map[string]string {
	t.Helper()
	e, _ := r.JSON["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	fs, _ := d["fields"].([]any)
	out := map[string]string{}
	for _, f := range fs {
		m := f.(map[string]any)
		out[m["field"].(string)] = m["code"].(string)
	}
	return out
}

type readyArtifacts struct{}

func (readyArtifacts) VersionArtifactsReady(context.Context, storage.Tx, string, string, []manifest.Artifact) error {
	return nil
}

func TestCatalogManifestRegistration(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		// The two seed samples register, as JSON and as YAML.
		r := admin.Do("POST", manifestsPath, readExample(t, "jupyter-cuda-dev.json")).Want(t, 201)
		if r.String("app_result") != "created" || r.JSON["changed"] != true {
			t.Fatalf("jupyter: %s", r.Body)
		}
		vs := r.JSON["versions"].([]any)
		if v := vs[0].(map[string]any); v["status"] != "draft" || v["result"] != "created" || v["version"] != "1.4.2" {
			t.Fatalf("jupyter version: %v", v)
		}
		yamlBody(admin, string(readExample(t, "slurm-reference.yaml"))).Want(t, 201)
		yamlBody(admin, string(readExample(t, "vllm-openai-compose.yaml"))).Want(t, 201)

		// An identical re-submission is a no-op, with one audit row saying so.
		r = admin.Do("POST", manifestsPath, readExample(t, "jupyter-cuda-dev.json")).Want(t, 200)
		if r.JSON["changed"] != false || r.String("app_result") != "unchanged" {
			t.Fatalf("resubmission: %s", r.Body)
		}
		if e := lastAudit(t, s, store.AuditFilter{Action: "app_manifest.resubmit"}); e.CorrelationID != r.Header.Get("X-Request-ID") {
			t.Fatalf("resubmission audit: %+v", e)
		}
		// The submitter is recorded.
		r = admin.Do("GET", rawCatalog+"/jupyter-cuda-dev/versions?status=draft", nil).Want(t, 200)
		if it := r.Items(); len(it) != 1 || !strings.HasPrefix(it[0]["submitted_by"].(string), "user:") {
			t.Fatalf("submitted_by: %s", r.Body)
		}

		// Broken manifests are refused with the pointer and line of each problem.
		dir := filepath.Join("..", "manifest", "testdata", "invalid")
		for _, name := range []string{"tag-instead-of-digest.json", "unknown-runtime-kind.yaml", "gpu-bounds-reversed.yaml",
			"bad-slug.json", "raw-compose.yaml", "config-schema-not-schema.yaml", "yaml-syntax.yaml"} {
			t.Run(name, func(t *testing.T) {
				data, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				_, want, _ := manifest.Parse(data, name)
				ct := "application/json"
				if strings.HasSuffix(name, ".yaml") {
					ct = "application/yaml"
				}
				r := admin.Do("POST", manifestsPath, data, "Content-Type", ct).Want(t, 422)
				if r.ErrorCode() != "manifest_invalid" {
					t.Fatalf("code: %s", r.Body)
				}
				probs := r.JSON["error"].(map[string]any)["details"].(map[string]any)["problems"].([]any)
				if len(probs) != len(want) {
					t.Fatalf("got %d problems, offline validator finds %d: %s", len(probs), len(want), r.Body)
				}
				for i, p := range probs {
					m := p.(map[string]any)
					line, _ := m["line"].(float64)
					if m["pointer"] != want[i].Pointer || int(line) != want[i].Line || want[i].Line == 0 {
						t.Fatalf("problem %d: %v, want %+v", i, m, want[i])
					}
				}
			})
		}
		admin.Do("POST", manifestsPath, []byte("a: b"), "Content-Type", "text/plain").Want(t, 400)
		admin.Do("POST", manifestsPath, []byte(" "), "Content-Type", "application/yaml").Want(t, 400)

		// A changed body of a published version is refused; bump the version.
		s.App.API.Catalog.SetArtifactGate(nil)
		yamlBody(admin, bareApp).Want(t, 201)
		admin.Do("POST", adminVersionPath("bare-slurm", "1.0.0", "publish"), map[string]string{"reason": "reviewed"}).Want(t, 200)
		r = yamlBody(admin, strings.Replace(bareApp, "default: gpu", "default: batch", 1)).Want(t, 409)
		if r.ErrorCode() != "version_immutable" || !strings.Contains(string(r.Body), "bump the version") {
			t.Fatalf("immutable: %s", r.Body)
		}
		r = yamlBody(admin, strings.Replace(strings.Replace(bareApp, "default: gpu", "default: batch", 1), "1.0.0", "1.0.1", 1)).Want(t, 201)
		if vs := r.JSON["versions"].([]any); vs[0].(map[string]any)["status"] != "draft" {
			t.Fatalf("bumped version: %s", r.Body)
		}
	})
}

func TestCatalogLifecycleAndEntitlements(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		pid := s.Creds.ProjectID
		s.App.API.Catalog.SetArtifactGate(nil)
		_, projAdmin := member(t, s, admin, "padmin@example.com", "project_admin", pid)
		_, operator := member(t, s, admin, "operator@example.com", "app_operator", pid)
		_, viewer := member(t, s, admin, "viewer@example.com", "project_viewer", pid)

		yamlBody(admin, bareApp).Want(t, 201)
		// Without an artifact registry a version that references artifacts cannot be published.
		admin.Do("POST", manifestsPath, readExample(t, "jupyter-cuda-dev.json")).Want(t, 201)
		r := admin.Do("POST", adminVersionPath("jupyter-cuda-dev", "1.4.2", "publish"), map[string]string{"reason": "go"}).Want(t, 409)
		if r.ErrorCode() != "artifact_registry_not_configured" || !strings.Contains(string(r.Body), "artifact registry is not configured") {
			t.Fatalf("publish without registry: %s", r.Body)
		}

		// A draft is in no project's catalog and hidden from non-admins.
		if got := projectCatalogSlugs(t, viewer, pid); len(got) != 0 {
			t.Fatalf("draft visible in project catalog: %v", got)
		}
		viewer.Do("GET", rawCatalog+"/bare-slurm", nil).Want(t, 404)
		if st := versionStatuses(t, admin, "bare-slurm"); st["1.0.0"] != "draft" {
			t.Fatalf("admin view of draft: %v", st)
		}
		admin.Do("POST", adminVersionPath("bare-slurm", "1.0.0", "publish"), map[string]string{}).Want(t, 400)
		r = admin.Do("POST", adminVersionPath("bare-slurm", "1.0.0", "publish"), map[string]string{"reason": "reviewed by platform"}).Want(t, 200)
		if r.String("status") != "published" || r.String("published_at") == "" {
			t.Fatalf("publish: %s", r.Body)
		}
		e := lastAudit(t, s, store.AuditFilter{Action: "app_version.publish"})
		if jsonField(t, e.Before, "status") != "draft" || jsonField(t, e.After, "status") != "published" || e.Reason != "reviewed by platform" {
			t.Fatalf("publish audit: %+v", e)
		}
		// Published, in the raw catalog, but not in the project's until entitled.
		if st := versionStatuses(t, viewer, "bare-slurm"); st["1.0.0"] != "published" {
			t.Fatalf("raw catalog: %v", st)
		}
		viewer.Do("GET", rawCatalog+"/bare-slurm", nil).Want(t, 200)
		r = viewer.Do("GET", rawCatalog, nil).Want(t, 200)
		if len(r.Items()) != 1 {
			t.Fatalf("raw catalog for viewer lists drafts: %s", r.Body)
		}
		if got := projectCatalogSlugs(t, viewer, pid); len(got) != 0 {
			t.Fatalf("unentitled app in project catalog: %v", got)
		}
		if r := operator.Do("POST", previewPath(pid, "bare-slurm", "1.0.0"), map[string]any{}).Want(t, 409); r.ErrorCode() != "app_not_entitled" {
			t.Fatalf("preview unentitled: %s", r.Body)
		}

		// Entitlements: project admins write; operators and viewers read only.
		body := map[string]any{"enabled": true, "policy_overrides": map[string]any{
			"allowed_operating_modes": []string{"tenant_dedicated"}, "allowed_control_plane_scopes": []string{"project"}}}
		for _, c := range []*servertest.Client{operator, viewer} {
			c.Do("PUT", entitlementPath(pid, "bare-slurm"), body).Want(t, 403)
		}
		r = projAdmin.Do("PUT", entitlementPath(pid, "bare-slurm"), body).Want(t, 200)
		if r.JSON["enabled"] != true {
			t.Fatalf("entitle: %s", r.Body)
		}
		e = lastAudit(t, s, store.AuditFilter{Action: "app_entitlement.put", ProjectID: pid})
		if e.Before != nil || jsonField(t, e.After, "enabled") != true {
			t.Fatalf("entitlement audit: %+v", e)
		}
		for _, c := range []*servertest.Client{operator, viewer, projAdmin} {
			c.Do("GET", entitlementPath(pid, "bare-slurm"), nil).Want(t, 200)
			if n := len(c.Do("GET", "/api/v1/projects/"+pid+"/apps/entitlements", nil).Want(t, 200).Items()); n != 1 {
				t.Fatalf("entitlements listed: %d", n)
			}
		}
		if got := projectCatalogSlugs(t, viewer, pid); strings.Join(got["bare-slurm"], ",") != "1.0.0" {
			t.Fatalf("entitled app not in project catalog: %v", got)
		}
		r = operator.Do("POST", previewPath(pid, "bare-slurm", "1.0.0"), map[string]any{"config": map[string]any{}}).Want(t, 200)
		if r.String("operating_mode") != "tenant_dedicated" || r.String("control_plane_scope") != "project" ||
			r.String("tenant_boundary_mode") != "project_isolated" || r.JSON["config"].(map[string]any)["partition_name"] != "gpu" {
			t.Fatalf("preview: %s", r.Body)
		}
		// The entitlement narrows the scopes the app allows.
		r = operator.Do("POST", previewPath(pid, "bare-slurm", "1.0.0"), map[string]any{"control_plane_scope": "tenant"}).Want(t, 400)
		if fieldErrors(t, r)["/control_plane_scope"] != "not_entitled" {
			t.Fatalf("narrowed scope: %s", r.Body)
		}
		viewer.Do("POST", previewPath(pid, "bare-slurm", "1.0.0"), map[string]any{}).Want(t, 403)

		// Deprecate: still listed, no longer launchable.
		r = admin.Do("POST", adminVersionPath("bare-slurm", "1.0.0", "deprecate"), map[string]string{"reason": "superseded"}).Want(t, 200)
		if r.String("status") != "deprecated" {
			t.Fatalf("deprecate: %s", r.Body)
		}
		e = lastAudit(t, s, store.AuditFilter{Action: "app_version.deprecate"})
		if jsonField(t, e.Before, "status") != "published" || jsonField(t, e.After, "status") != "deprecated" || e.Reason != "superseded" {
			t.Fatalf("deprecate audit: %+v", e)
		}
		if r := operator.Do("POST", previewPath(pid, "bare-slurm", "1.0.0"), map[string]any{}).Want(t, 409); r.ErrorCode() != "version_not_launchable" {
			t.Fatalf("preview deprecated: %s", r.Body)
		}
		if st := versionStatuses(t, viewer, "bare-slurm"); st["1.0.0"] != "deprecated" {
			t.Fatalf("deprecated version not listed: %v", st)
		}
		if got := projectCatalogSlugs(t, viewer, pid); len(got) != 0 {
			t.Fatalf("deprecated version launchable from project catalog: %v", got)
		}

		// Non-admins are refused every admin step, and each refusal is audited.
		steps := []struct {
			path string
			body any
		}{
			{manifestsPath, readExample(t, "jupyter-cuda-dev.json")},
			{adminVersionPath("bare-slurm", "1.0.0", "publish"), map[string]string{"reason": "x"}},
			{adminVersionPath("bare-slurm", "1.0.0", "deprecate"), map[string]string{"reason": "x"}},
			{adminVersionPath("bare-slurm", "1.0.0", "retire"), map[string]string{"reason": "x"}},
		}
		for _, who := range []struct {
			name string
			c    *servertest.Client
		}{{"project admin", projAdmin}, {"app operator", operator}, {"viewer", viewer}} {
			for _, st := range steps {
				r := who.c.Do("POST", st.path, st.body).Want(t, 403)
				cid := r.Header.Get("X-Request-ID")
				e := lastAudit(t, s, store.AuditFilter{CorrelationID: cid})
				if e.Outcome != "denied" {
					t.Fatalf("%s refused %s without a denied audit row: %+v", who.name, st.path, e)
				}
			}
		}

		// Retire (no instances domain yet: nothing blocks it).
		admin.Do("POST", adminVersionPath("bare-slurm", "1.0.0", "retire"), map[string]string{"reason": "grace period over"}).Want(t, 200)
		e = lastAudit(t, s, store.AuditFilter{Action: "app_version.retire"})
		if jsonField(t, e.Before, "status") != "deprecated" || jsonField(t, e.After, "status") != "retired" {
			t.Fatalf("retire audit: %+v", e)
		}
		if r := admin.Do("POST", adminVersionPath("bare-slurm", "1.0.0", "publish"), map[string]string{"reason": "again"}).Want(t, 409); r.ErrorCode() != "invalid_version_transition" {
			t.Fatalf("publish retired: %s", r.Body)
		}
		admin.Do("POST", adminVersionPath("bare-slurm", "9.9.9", "publish"), map[string]string{"reason": "x"}).Want(t, 404)
	})
}

func TestCatalogEntitlementIsolation(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		pidA := s.Creds.ProjectID
		pidB := admin.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/projects", map[string]string{"slug": "other", "name": "Other"}).Want(t, 201).String("id")
		_, projAdmin := member(t, s, admin, "padmin-a@example.com", "project_admin", pidA)
		yamlBody(admin, bareApp).Want(t, 201)
		body := map[string]any{"enabled": true}
		projAdmin.Do("PUT", entitlementPath(pidA, "bare-slurm"), body).Want(t, 200)
		for _, r := range []*servertest.Response{
			projAdmin.Do("PUT", entitlementPath(pidB, "bare-slurm"), body),
			projAdmin.Do("GET", entitlementPath(pidB, "bare-slurm"), nil),
			projAdmin.Do("GET", "/api/v1/projects/"+pidB+"/apps/entitlements", nil),
			projAdmin.Do("GET", "/api/v1/projects/"+pidB+"/apps/catalog", nil),
			projAdmin.Do("POST", previewPath(pidB, "bare-slurm", "1.0.0"), map[string]any{}),
		} {
			if r.Status != http.StatusNotFound || r.ErrorCode() != "project_not_found" {
				t.Fatalf("cross-project access: %d %s", r.Status, r.Body)
			}
		}
		// Bad input is refused with field errors and writes nothing.
		r := projAdmin.Do("PUT", entitlementPath(pidA, "bare-slurm"), map[string]any{"policy_overrides": map[string]any{}}).Want(t, 400)
		if fieldErrors(t, r)["/enabled"] != "required" {
			t.Fatalf("missing enabled: %s", r.Body)
		}
		r = projAdmin.Do("PUT", entitlementPath(pidA, "bare-slurm"), map[string]any{"enabled": true, "policy_overrides": map[string]any{
			"allowed_operating_modes": []string{"platform_managed"}, "allowed_control_plane_scopes": []string{"galaxy"},
			"allowed_versions": []string{"7.0.0"}}}).Want(t, 400)
		fe := fieldErrors(t, r)
		if fe["/policy_overrides/allowed_operating_modes/0"] != "not_supported" || fe["/policy_overrides/allowed_control_plane_scopes/0"] != "invalid" ||
			fe["/policy_overrides/allowed_versions/0"] != "invalid" {
			t.Fatalf("bad overrides: %s", r.Body)
		}
		projAdmin.Do("PUT", entitlementPath(pidA, "no-such-app"), body).Want(t, 404)
		projAdmin.Do("GET", entitlementPath(pidA, "no-such-app"), nil).Want(t, 404)
	})
}

func TestCatalogLaunchPreviewBounds(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		pid := s.Creds.ProjectID
		// Stand in for the artifact registry: every artifact is ready.
		s.App.API.Catalog.SetArtifactGate(readyArtifacts{})
		jupyter := readExample(t, "jupyter-cuda-dev.json")
		admin.Do("POST", manifestsPath, jupyter).Want(t, 201)
		admin.Do("POST", manifestsPath, []byte(strings.Replace(string(jupyter), `"version": "1.4.2"`, `"version": "1.5.0"`, 1))).Want(t, 201)
		yamlBody(admin, string(readExample(t, "slurm-reference.yaml"))).Want(t, 201)
		for _, v := range [][2]string{{"jupyter-cuda-dev", "1.4.2"}, {"jupyter-cuda-dev", "1.5.0"}, {"slurm-reference", "24.05.0"}} {
			admin.Do("POST", adminVersionPath(v[0], v[1], "publish"), map[string]string{"reason": "artifacts verified"}).Want(t, 200)
		}
		admin.Do("PUT", entitlementPath(pid, "jupyter-cuda-dev"), map[string]any{"enabled": true,
			"policy_overrides": map[string]any{"allowed_versions": []string{"1.4.2"}, "canary_opt_in": true}}).Want(t, 200)
		admin.Do("PUT", entitlementPath(pid, "slurm-reference"), map[string]any{"enabled": true,
			"policy_overrides": map[string]any{"allowed_control_plane_scopes": []string{"project"}}}).Want(t, 200)
		got := projectCatalogSlugs(t, admin, pid)
		if strings.Join(got["jupyter-cuda-dev"], ",") != "1.4.2" || strings.Join(got["slurm-reference"], ",") != "24.05.0" {
			t.Fatalf("project catalog: %v", got)
		}

		// Defaults applied.
		r := admin.Do("POST", previewPath(pid, "jupyter-cuda-dev", "1.4.2"), map[string]any{}).Want(t, 200)
		res := r.JSON["resources"].(map[string]any)
		if res["gpu_count"] != float64(1) || res["cpu_cores"] != float64(8) || res["memory_gib"] != float64(32) || res["host_port"] != float64(18888) {
			t.Fatalf("defaults: %s", r.Body)
		}
		// Every bound is enforced, all at once, field by field.
		r = admin.Do("POST", previewPath(pid, "jupyter-cuda-dev", "1.4.2"), map[string]any{
			"resources":      map[string]any{"gpu_count": 9, "cpu_cores": 65, "memory_gib": 513, "host_port": 80},
			"operating_mode": "platform_managed",
			"parameters":     map[string]any{"pip_packages": []string{"numpy>=1.26", "https://evil.example/x.whl"}},
		}).Want(t, 400)
		fe := fieldErrors(t, r)
		for field, code := range map[string]string{
			"/resources/gpu_count": "out_of_range", "/resources/cpu_cores": "out_of_range", "/resources/memory_gib": "out_of_range",
			"/resources/host_port": "out_of_range", "/operating_mode": "not_supported", "/parameters/pip_packages/1": "invalid_requirement",
		} {
			if fe[field] != code {
				t.Errorf("%s: code %q, want %q (all: %v)", field, fe[field], code, fe)
			}
		}
		// Below the minimum too.
		r = admin.Do("POST", previewPath(pid, "jupyter-cuda-dev", "1.4.2"), map[string]any{"resources": map[string]any{"gpu_count": 0, "cpu_cores": 2}}).Want(t, 400)
		if fe := fieldErrors(t, r); fe["/resources/gpu_count"] != "out_of_range" || fe["/resources/cpu_cores"] != "out_of_range" {
			t.Fatalf("minimums: %s", r.Body)
		}
		// The entitlement's allowed versions.
		r = admin.Do("POST", previewPath(pid, "jupyter-cuda-dev", "1.5.0"), map[string]any{}).Want(t, 400)
		if fieldErrors(t, r)["/version"] != "not_entitled" {
			t.Fatalf("allowed versions: %s", r.Body)
		}
		// The entitlement's scopes: the manifest allows tenant, the project does not.
		r = admin.Do("POST", previewPath(pid, "slurm-reference", "24.05.0"), map[string]any{"control_plane_scope": "tenant"}).Want(t, 400)
		if fieldErrors(t, r)["/control_plane_scope"] != "not_entitled" {
			t.Fatalf("scope override: %s", r.Body)
		}
		r = admin.Do("POST", previewPath(pid, "slurm-reference", "24.05.0"), map[string]any{
			"placement_intent": map[string]any{"controller_allocation_ids": []string{"a1"}}}).Want(t, 200)
		if r.String("control_plane_scope") != "project" {
			t.Fatalf("slurm preview: %s", r.Body)
		}
		// Previews write nothing.
		before := auditCount(t, s)
		admin.Do("POST", previewPath(pid, "jupyter-cuda-dev", "1.4.2"), map[string]any{}, "X-Idempotency-Key", "k1").Want(t, 200)
		if auditCount(t, s) != before {
			t.Fatal("launch-preview wrote an audit row")
		}
		admin.Do("POST", previewPath(pid, "jupyter-cuda-dev", "0.0.1"), map[string]any{}).Want(t, 404)
		admin.Do("POST", previewPath(pid, "nope", "1.0.0"), map[string]any{}).Want(t, 404)
	})
}
