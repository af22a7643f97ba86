package catalog_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// bareManifest declares no artifacts at all, so it can be published with
// no artifact registry.
const bareManifest = `
app:
  slug: bare-slurm
  display_name: Bare Slurm
  runtime_backend: slurm
version:
  version: 1.0.0
  config_schema:
    type: object
    properties:
      partition_name: {type: string, default: gpu}
`

type fixture struct {
	svc *catalog.Service
	db  *store.DB
	ctx context.Context
	g   *iam.Grants
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db := storetest.Open(t, store.SQLite)
	logger := slog.New(slog.DiscardHandler)
	svc := catalog.NewService(catalog.Deps{Store: store.Catalog(db), IAM: &iam.Service{Store: store.IAM(db), Logger: logger}, Logger: logger})
	ctx := context.Background()
	p := principal.Principal{Type: principal.User, ID: iam.NewID()}
	if err := db.Queries().CreateRoleBinding(ctx, iam.RoleBinding{ID: iam.NewID(), PrincipalType: "user", PrincipalID: p.ID,
		Role: iam.RolePlatformAdmin, ScopeType: iam.ScopePlatform, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	g, err := iam.LoadGrants(ctx, db.Queries(), p)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{svc: svc, db: db, ctx: principal.With(ctx, p), g: g}
}

func (f *fixture) register(t *testing.T, data, syntax string) catalog.Registration {
	t.Helper()
	reg, err := f.svc.RegisterManifest(f.ctx, f.g, []byte(data), syntax)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	return reg
}

func (f *fixture) registerExample(t *testing.T, file string) catalog.Registration {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "manifests", file))
	if err != nil {
		t.Fatal(err)
	}
	syntax := catalog.SyntaxYAML
	if strings.HasSuffix(file, ".json") {
		syntax = catalog.SyntaxJSON
	}
	return f.register(t, string(data), syntax)
}

func (f *fixture) audits(t *testing.T, action string) []store.AuditEvent {
	t.Helper()
	evs, _, err := f.db.Queries().ListAudit(context.Background(), store.AuditFilter{Action: action}, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func errCode(err error) string {
	if e, ok := errdefs.As(err); ok {
		return e.Code
	}
	return ""
}

type fakeArtifacts struct {
	err      error
	calls    int
	expected []manifest.Artifact
}

func (f *fakeArtifacts) VersionArtifactsReady(_ context.Context, tx storage.Tx, appSlug, version string, expected []manifest.Artifact) error {
	if tx == nil {
		return errors.New("no transaction")
	}
	f.calls++
	f.expected = expected
	return f.err
}

type fakeInstances struct{ n int }

func (f *fakeInstances) LiveInstances(context.Context, storage.Tx, string, string) (int, error) {
	return f.n, nil
}

func TestReferencedArtifacts(t *testing.T) {
	t.Parallel()
	for file, want := range map[string][]string{
		"jupyter-cuda-dev.json":    {catalog.DefaultArtifactName}, // artifact_ref and image_ref are one image
		"slurm-reference.yaml":     {"runtime"},
		"vllm-openai-compose.yaml": {"vllm", "metrics-sidecar"},
	} {
		got := catalog.ReferencedArtifacts(catalog.ExampleVersion(t, file))
		var names []string
		for _, a := range got {
			names = append(names, a.Name)
		}
		if strings.Join(names, ",") != strings.Join(want, ",") {
			t.Errorf("%s: referenced %v, want %v", file, names, want)
		}
	}
	pkg, problems, err := manifest.Parse([]byte(bareManifest), "bare.yaml")
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	if got := catalog.ReferencedArtifacts(pkg.Versions[0]); len(got) != 0 {
		t.Fatalf("bare version references %v", got)
	}
}

func TestPublishGate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.registerExample(t, "slurm-reference.yaml")
	f.register(t, bareManifest, catalog.SyntaxYAML)

	// No artifact registry: a version with artifacts cannot be published…
	_, err := f.svc.TransitionVersion(f.ctx, f.g, "slurm-reference", "24.05.0", catalog.ActionPublish, "review done")
	if errdefs.KindOf(err) != errdefs.KindFailedPrecondition || errCode(err) != "artifact_registry_not_configured" ||
		!strings.Contains(err.Error(), "artifact registry is not configured") {
		t.Fatalf("publish without registry: %v", err)
	}
	if v, _ := f.db.Queries().GetAppVersion(f.ctx, "slurm-reference", "24.05.0"); v.Status != catalog.StatusDraft {
		t.Fatalf("refused publish changed status to %s", v.Status)
	}
	// …but one without artifacts can.
	v, err := f.svc.TransitionVersion(f.ctx, f.g, "bare-slurm", "1.0.0", catalog.ActionPublish, "review done")
	if err != nil || v.Status != catalog.StatusPublished || v.PublishedAt.IsZero() || v.StatusReason != "review done" {
		t.Fatalf("publish bare: %+v %v", v, err)
	}

	// A registry that refuses: its error reaches the caller unchanged.
	gate := &fakeArtifacts{err: errdefs.FailedPrecondition("artifact_not_verified", "artifact runtime is unverified")}
	f.svc.SetArtifactGate(gate)
	_, err = f.svc.TransitionVersion(f.ctx, f.g, "slurm-reference", "24.05.0", catalog.ActionPublish, "review done")
	if errCode(err) != "artifact_not_verified" || gate.calls != 1 || len(gate.expected) != 1 || gate.expected[0].Repository != "apps/slurm-reference/runtime" {
		t.Fatalf("refusing gate: %v (calls %d, expected %+v)", err, gate.calls, gate.expected)
	}
	// A registry that fails: an internal error, not a verdict.
	gate.err = errors.New("database on fire")
	_, err = f.svc.TransitionVersion(f.ctx, f.g, "slurm-reference", "24.05.0", catalog.ActionPublish, "review done")
	if err == nil || errdefs.KindOf(err) != errdefs.KindInternal {
		t.Fatalf("failing gate: %v", err)
	}
	// A registry that vouches for every artifact.
	gate.err = nil
	if v, err := f.svc.TransitionVersion(f.ctx, f.g, "slurm-reference", "24.05.0", catalog.ActionPublish, "artifacts active"); err != nil || v.Status != catalog.StatusPublished {
		t.Fatalf("publish with ready artifacts: %+v %v", v, err)
	}
	if n := len(f.audits(t, "app_version.publish")); n != 2 {
		t.Fatalf("%d publish audit rows, want 2 (refusals write none)", n)
	}
	// Publishing twice is a state error.
	if _, err := f.svc.TransitionVersion(f.ctx, f.g, "bare-slurm", "1.0.0", catalog.ActionPublish, "again"); errCode(err) != "invalid_version_transition" {
		t.Fatalf("publish twice: %v", err)
	}
}

func TestRetireGate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.register(t, bareManifest, catalog.SyntaxYAML)
	step := func(action string) (catalog.AppVersion, error) {
		return f.svc.TransitionVersion(f.ctx, f.g, "bare-slurm", "1.0.0", action, "because")
	}
	if _, err := step(catalog.ActionRetire); errCode(err) != "invalid_version_transition" {
		t.Fatalf("retire a draft: %v", err)
	}
	if _, err := step(catalog.ActionPublish); err != nil {
		t.Fatal(err)
	}
	if _, err := step(catalog.ActionDeprecate); err != nil {
		t.Fatal(err)
	}
	// Without an instances domain nothing blocks retiring.
	f.register(t, strings.Replace(bareManifest, "1.0.0", "1.0.1", 1), catalog.SyntaxYAML)
	for _, a := range []string{catalog.ActionPublish, catalog.ActionDeprecate, catalog.ActionRetire} {
		if _, err := f.svc.TransitionVersion(f.ctx, f.g, "bare-slurm", "1.0.1", a, "because"); err != nil {
			t.Fatalf("%s with no instance gate: %v", a, err)
		}
	}
	// Every gate is asked: one domain's live instances hold the version
	// even when another's has none.
	none, two := &fakeInstances{n: 0}, &fakeInstances{n: 2}
	f.svc.AddInstanceGate(none)
	f.svc.AddInstanceGate(two)
	if _, err := step(catalog.ActionRetire); errCode(err) != "version_in_use" || !strings.Contains(err.Error(), "2 live instance") {
		t.Fatalf("retire in use: %v", err)
	}
	two.n = 0
	v, err := step(catalog.ActionRetire)
	if err != nil || v.Status != catalog.StatusRetired || v.RetiredAt.IsZero() || v.DeprecatedAt.IsZero() {
		t.Fatalf("retire: %+v %v", v, err)
	}
	if _, err := step("delete"); errCode(err) != "unknown_action" {
		t.Fatalf("unknown action: %v", err)
	}
	if _, err := f.svc.TransitionVersion(f.ctx, f.g, "bare-slurm", "1.0.1", catalog.ActionRetire, "  "); errdefs.KindOf(err) != errdefs.KindInvalidArgument {
		t.Fatalf("blank reason: %v", err)
	}
}

func TestRegisterIdempotentAndImmutable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reg := f.register(t, bareManifest, catalog.SyntaxYAML)
	if !reg.Created || !reg.Changed || reg.Versions[0].Result != catalog.ResultCreated || reg.Versions[0].Status != catalog.StatusDraft ||
		!strings.HasPrefix(reg.Versions[0].SubmittedBy, "user:") {
		t.Fatalf("first registration: %+v", reg)
	}
	// The same package in other words (JSON, other key order) is a no-op.
	same := `{"version": {"config_schema": {"properties": {"partition_name": {"default": "gpu", "type": "string"}}, "type": "object"}, "version": "1.0.0"},
	 "app": {"runtime_backend": "slurm", "display_name": "Bare Slurm", "slug": "bare-slurm"}}`
	reg = f.register(t, same, catalog.SyntaxJSON)
	if reg.Created || reg.Changed || reg.AppResult != catalog.ResultUnchanged || reg.Versions[0].Result != catalog.ResultUnchanged {
		t.Fatalf("identical re-submission: %+v", reg)
	}
	if n := len(f.audits(t, "app_manifest.resubmit")); n != 1 {
		t.Fatalf("%d resubmit rows", n)
	}
	// A draft's body may still change.
	changed := strings.Replace(bareManifest, "default: gpu", "default: batch", 1)
	reg = f.register(t, changed, catalog.SyntaxYAML)
	if !reg.Changed || reg.Versions[0].Result != catalog.ResultUpdated {
		t.Fatalf("draft change: %+v", reg)
	}
	// Once published it may not.
	if _, err := f.svc.TransitionVersion(f.ctx, f.g, "bare-slurm", "1.0.0", catalog.ActionPublish, "ok"); err != nil {
		t.Fatal(err)
	}
	_, err := f.svc.RegisterManifest(f.ctx, f.g, []byte(bareManifest), catalog.SyntaxYAML)
	if errdefs.KindOf(err) != errdefs.KindConflict || errCode(err) != "version_immutable" || !strings.Contains(err.Error(), "bump the version") {
		t.Fatalf("changed published body: %v", err)
	}
	// App metadata is not versioned: it may change.
	reg = f.register(t, strings.Replace(changed, "Bare Slurm", "Bare Slurm 2", 1), catalog.SyntaxYAML)
	if reg.AppResult != catalog.ResultUpdated || reg.App.DisplayName != "Bare Slurm 2" || reg.Versions[0].Result != catalog.ResultUnchanged {
		t.Fatalf("metadata change: %+v", reg)
	}
	if n := len(f.audits(t, "app_manifest.register")); n != 3 {
		t.Fatalf("%d register rows, want 3", n)
	}
	// Problems come back with pointer and line.
	_, err = f.svc.RegisterManifest(f.ctx, f.g, []byte(strings.Replace(bareManifest, "bare-slurm", "Bare_Slurm", 1)), catalog.SyntaxYAML)
	e, ok := errdefs.As(err)
	if !ok || e.Kind != errdefs.KindUnprocessable || e.Code != "manifest_invalid" {
		t.Fatalf("bad slug: %v", err)
	}
	ps := e.Details["problems"].([]manifest.Problem)
	if len(ps) == 0 || ps[0].Pointer != "/app/slug" || ps[0].Line != 3 {
		t.Fatalf("problems: %+v", ps)
	}
}

// TestPublishGateSeesTheRunningDigest checks that a declared artifact with
// no digest takes the digest of the image_ref it stands for: the gate once
// got the bare name, and a version whose image digest was never registered
// published because another digest under that name was active and verified.
func TestPublishGateSeesTheRunningDigest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	digest := "sha256:" + strings.Repeat("b", 64)
	f.register(t, `
app: {slug: pinned, display_name: Pinned, runtime_backend: launchable_oci}
version:
  version: 1.0.0
  artifacts:
    - {name: runtime, artifact_kind: oci, source_type: oci_registry, repository: apps/pinned}
  runtime_profile:
    kind: launchable_oci
    image_ref: registry.example.com/apps/pinned@`+digest+`
`, catalog.SyntaxYAML)
	gate := &fakeArtifacts{}
	f.svc.SetArtifactGate(gate)
	if _, err := f.svc.TransitionVersion(f.ctx, f.g, "pinned", "1.0.0", catalog.ActionPublish, "review done"); err != nil {
		t.Fatal(err)
	}
	if len(gate.expected) != 1 || gate.expected[0].Name != "runtime" || gate.expected[0].Digest != digest {
		t.Fatalf("gate asked for %+v, want runtime pinned to %s", gate.expected, digest)
	}
}

// entitlementReader serves one project and one org entitlement.
type entitlementReader struct{ project, org catalog.AppEntitlement }

func (r entitlementReader) GetAppBySlug(context.Context, string) (catalog.App, error) {
	return catalog.App{}, nil
}
func (r entitlementReader) GetEntitlement(context.Context, string, string) (catalog.AppEntitlement, error) {
	return r.project, nil
}
func (r entitlementReader) GetOrgEntitlement(context.Context, string, string) (catalog.AppEntitlement, error) {
	return r.org, nil
}
func (r entitlementReader) GetAppVersion(context.Context, string, string) (catalog.AppVersion, error) {
	return catalog.AppVersion{}, errors.New("not used")
}

// TestOrgEntitlementJudgesTheProjectsChoice checks that the org's
// entitlement, asked about an org-shared launch, judges the scope the
// project's entitlement chose. It once resolved the request afresh, so a
// project narrowed to scope tenant launched an unhinted request with scope
// project, which its entitlement excludes.
func TestOrgEntitlementJudgesTheProjectsChoice(t *testing.T) {
	t.Parallel()
	pkg, problems, err := manifest.Parse([]byte(`
app: {slug: shared, display_name: Shared, runtime_backend: slurm,
  supported_modes: {operating_modes: [tenant_dedicated], control_plane_scopes: [project, tenant]}}
version: {version: 1.0.0}
`), "m.yaml")
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	ent := func(overrides string) catalog.AppEntitlement {
		return catalog.AppEntitlement{AppSlug: "shared", Enabled: true, PolicyOverrides: []byte(overrides)}
	}
	project := iam.Project{ID: iam.NewID(), OrgID: iam.NewID()}
	resolve := func(org string) (catalog.Effective, error) {
		r := entitlementReader{project: ent(`{"allowed_control_plane_scopes":["tenant"]}`), org: ent(org)}
		return catalog.ResolveEntitled(context.Background(), r, project, "shared", pkg.Versions[0], catalog.LaunchRequest{})
	}
	if eff, err := resolve(`{}`); err != nil || eff.ControlPlaneScope != manifest.ScopeTenant || eff.TenantBoundaryMode != catalog.BoundaryTenantShared {
		t.Fatalf("org without overrides: %+v %v", eff, err)
	}
	if eff, err := resolve(`{"allowed_control_plane_scopes":["project"]}`); errdefs.KindOf(err) != errdefs.KindInvalidArgument {
		t.Fatalf("org excluding tenant: %+v %v", eff, err)
	}
}
