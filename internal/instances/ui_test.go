package instances

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/storage"
)

func TestUIHost(t *testing.T) {
	for _, c := range []struct {
		bind, node, want string
	}{
		{"", "", "127.0.0.1"},
		{"127.0.0.1", "127.0.0.1", "127.0.0.1"},
		{"0.0.0.0", "localhost", "127.0.0.1"},
		{"10.0.0.5", "gpu-7.example.com", "10.0.0.5"},
		{"0.0.0.0", "10.0.0.7", "10.0.0.7"},
		{"127.0.0.1", "10.0.0.7", "10.0.0.7"},
	} {
		if got := uiHost(&Access{BindAddress: c.bind, NodeAddress: c.node}); got != c.want {
			t.Errorf("bind %q node %q: %q, want %q", c.bind, c.node, got, c.want)
		}
	}
}

// uiQueries answers the reads the UI checks make; any other call panics
// (the embedded Queries is nil).
type uiQueries struct {
	Queries
	users     map[string]iam.User
	bindings  map[string][]iam.RoleBinding
	instances map[string]AppInstance
	attached  map[[2]string]bool // instance, project
	projects  map[string]iam.Project
	manifest  []byte
	codes     map[string]*UIOpenCode // by hash
	failing   error                  // what reading bindings answers, when set
}

func (q *uiQueries) UsableUIOpenCode(_ context.Context, codeHash, instanceID string, at time.Time) (UIOpenCode, error) {
	c, ok := q.codes[codeHash]
	if !ok || c.InstanceID != instanceID || !c.UsedAt.IsZero() || !at.Before(c.ExpiresAt) {
		return UIOpenCode{}, storage.ErrNotFound
	}
	return *c, nil
}

func (q *uiQueries) RedeemUIOpenCode(ctx context.Context, codeHash, instanceID string, at time.Time) (UIOpenCode, error) {
	c, err := q.UsableUIOpenCode(ctx, codeHash, instanceID, at)
	if err == nil {
		q.codes[codeHash].UsedAt = at
		c.UsedAt = at
	}
	return c, err
}

func (q *uiQueries) GetProject(_ context.Context, id string) (iam.Project, error) {
	p, ok := q.projects[id]
	if !ok {
		return iam.Project{}, storage.ErrNotFound
	}
	return p, nil
}

func (q *uiQueries) GetUser(_ context.Context, id string) (iam.User, error) {
	u, ok := q.users[id]
	if !ok {
		return iam.User{}, storage.ErrNotFound
	}
	return u, nil
}

func (q *uiQueries) BindingsOfPrincipal(_ context.Context, _, id string) ([]iam.RoleBinding, error) {
	return q.bindings[id], q.failing
}

func (q *uiQueries) GetAppInstanceByID(_ context.Context, id string) (AppInstance, error) {
	inst, ok := q.instances[id]
	if !ok {
		return AppInstance{}, storage.ErrNotFound
	}
	return inst, nil
}

func (q *uiQueries) InstanceAttached(_ context.Context, instanceID, projectID string) (bool, error) {
	return q.attached[[2]string{instanceID, projectID}], nil
}

func (q *uiQueries) GetAppVersion(_ context.Context, appSlug, version string) (catalog.AppVersion, error) {
	return catalog.AppVersion{AppSlug: appSlug, Version: version, Manifest: q.manifest}, nil
}

// uiManifest is a version body serving an embedded UI on port 8080.
func uiManifest(t *testing.T) []byte {
	t.Helper()
	mv, err := json.Marshal(manifest.Version{UI: &manifest.UI{ExtensionKind: "embedded"},
		RuntimeProfile: &manifest.RuntimeProfile{Ports: []manifest.Port{{Container: 8080, Expose: manifest.ExposeEmbeddedUIGateway}}}})
	if err != nil {
		t.Fatal(err)
	}
	return mv
}

type uiStore struct {
	Store
	q *uiQueries
}

func (s uiStore) Read() Queries { return s.q }

// RecheckUI, the gateway's check of a grant it holds, refuses once the
// person's role is removed or their account disabled, as RedeemUI does;
// and a grant through an attached project holds only while it is attached.
func TestRecheckUI(t *testing.T) {
	ctx := context.Background()
	mv := uiManifest(t)
	viewer := func(user, project string) iam.RoleBinding {
		return iam.RoleBinding{ID: user + project, PrincipalType: "user", PrincipalID: user, Role: iam.RoleProjectViewer,
			ScopeType: iam.ScopeProject, ScopeID: project, OrgID: "org"}
	}
	q := &uiQueries{
		users:    map[string]iam.User{"ann": {ID: "ann", Status: iam.UserActive}, "bob": {ID: "bob", Status: iam.UserActive}},
		bindings: map[string][]iam.RoleBinding{"ann": {viewer("ann", "p1")}, "bob": {viewer("bob", "p2")}},
		instances: map[string]AppInstance{"i1": {ID: "i1", OrgID: "org", ProjectID: "p1", AppSlug: "lab", Version: "1.0.0",
			Status: StatusRunning}},
		attached: map[[2]string]bool{{"i1", "p2"}: true},
		projects: map[string]iam.Project{"p1": {ID: "p1", OrgID: "org"}, "p2": {ID: "p2", OrgID: "org"}},
		manifest: mv,
	}
	s := New(Deps{Store: uiStore{q: q}})
	ann := UIGrant{UserID: "ann", OrgID: "org", ProjectID: "p1", InstanceID: "i1", Port: 8080}
	bob := UIGrant{UserID: "bob", OrgID: "org", ProjectID: "p2", InstanceID: "i1", Port: 8080}
	refused := func(what string, gr UIGrant) {
		t.Helper()
		if err := s.RecheckUI(ctx, gr); errdefs.KindOf(err) != errdefs.KindNotFound {
			t.Errorf("%s: %v, want a refusal (not found)", what, err)
		}
	}
	for _, gr := range []UIGrant{ann, bob, {UserID: "ann", InstanceID: "i1", Port: 8080}} {
		if err := s.RecheckUI(ctx, gr); err != nil {
			t.Fatalf("%+v: %v", gr, err)
		}
	}
	refused("another port", UIGrant{UserID: "ann", OrgID: "org", ProjectID: "p1", InstanceID: "i1", Port: 9090})
	refused("an unknown instance", UIGrant{UserID: "ann", OrgID: "org", ProjectID: "p1", InstanceID: "i2", Port: 8080})
	refused("an unknown person", UIGrant{UserID: "eve", OrgID: "org", ProjectID: "p1", InstanceID: "i1", Port: 8080})

	// The role removed.
	q.bindings["ann"] = nil
	refused("role removed", ann)
	q.bindings["ann"] = []iam.RoleBinding{viewer("ann", "p1")}
	if err := s.RecheckUI(ctx, ann); err != nil {
		t.Fatalf("role back: %v", err)
	}
	// The account disabled.
	q.users["ann"] = iam.User{ID: "ann", Status: iam.UserDisabled}
	refused("account disabled", ann)
	// The project detached from the shared instance.
	q.attached = nil
	refused("project detached", bob)
}

// A platform-managed instance is attached to projects of other orgs: a
// person who reads such a project through a role at its org (an org admin
// of the tenant) keeps the UI they opened through it, and loses it with
// that role. Their grant is judged at the project's own org, not at the
// instance's (the platform's).
func TestRecheckUIThroughAnotherOrgsProject(t *testing.T) {
	ctx := context.Background()
	mv := uiManifest(t)
	tenantAdmin := iam.RoleBinding{ID: "b1", PrincipalType: "user", PrincipalID: "xena", Role: iam.RoleOrgAdmin, ScopeType: iam.ScopeOrg, ScopeID: "org-x", OrgID: "org-x"}
	q := &uiQueries{
		users:    map[string]iam.User{"xena": {ID: "xena", Status: iam.UserActive}},
		bindings: map[string][]iam.RoleBinding{"xena": {tenantAdmin}},
		instances: map[string]AppInstance{"i1": {ID: "i1", OrgID: "platform-org", ProjectID: "home", AppSlug: "lab", Version: "1.0.0",
			Status: StatusRunning, OperatingMode: manifest.ModePlatformManaged, ControlPlaneScope: manifest.ScopePlatform}},
		attached: map[[2]string]bool{{"i1", "tp"}: true},
		projects: map[string]iam.Project{"home": {ID: "home", OrgID: "platform-org"}, "tp": {ID: "tp", OrgID: "org-x"}},
		manifest: mv,
	}
	s := New(Deps{Store: uiStore{q: q}})
	// What a code opened through project tp carried (the instance's org),
	// and what it carries now (the project's): both are judged at org-x.
	for _, org := range []string{"platform-org", "org-x"} {
		gr := UIGrant{UserID: "xena", OrgID: org, ProjectID: "tp", InstanceID: "i1", Port: 8080}
		if err := s.RecheckUI(ctx, gr); err != nil {
			t.Fatalf("the tenant's org admin, through the attached project (grant org %s): %v", org, err)
		}
	}
	q.bindings["xena"] = nil
	if err := s.RecheckUI(ctx, UIGrant{UserID: "xena", OrgID: "org-x", ProjectID: "tp", InstanceID: "i1", Port: 8080}); errdefs.KindOf(err) != errdefs.KindNotFound {
		t.Fatalf("the role removed: %v, want a refusal", err)
	}
}

// A code is used once, and only once its check could answer: a check that
// fails on the database leaves the code for the person's retry, while a
// refused one uses it up like a granted one.
func TestRedeemUIKeepsTheCodeWhenItsCheckCannotAnswer(t *testing.T) {
	ctx := context.Background()
	mv := uiManifest(t)
	now := time.Now().UTC()
	code := func(c string) *UIOpenCode {
		return &UIOpenCode{CodeHash: hashCode(c), UserID: "ann", OrgID: "org", ProjectID: "p1", InstanceID: "i1", Port: 8080,
			CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
	}
	viewer := iam.RoleBinding{ID: "b", PrincipalType: "user", PrincipalID: "ann", Role: iam.RoleProjectViewer, ScopeType: iam.ScopeProject, ScopeID: "p1", OrgID: "org"}
	q := &uiQueries{
		users:    map[string]iam.User{"ann": {ID: "ann", Status: iam.UserActive}},
		bindings: map[string][]iam.RoleBinding{"ann": {viewer}},
		instances: map[string]AppInstance{"i1": {ID: "i1", OrgID: "org", ProjectID: "p1", AppSlug: "lab", Version: "1.0.0",
			Status: StatusRunning}},
		projects: map[string]iam.Project{"p1": {ID: "p1", OrgID: "org"}},
		manifest: mv,
		codes:    map[string]*UIOpenCode{hashCode("first"): code("first"), hashCode("second"): code("second")},
	}
	s := New(Deps{Store: uiStore{q: q}, Now: func() time.Time { return now }})
	invalid := func(what, c string) {
		t.Helper()
		if _, err := s.RedeemUI(ctx, c, "i1"); !errors.Is(err, errUICode) {
			t.Fatalf("%s: %v, want %v", what, err, errUICode)
		}
	}

	down := errors.New("database down")
	q.failing = down
	if _, err := s.RedeemUI(ctx, "first", "i1"); !errors.Is(err, down) {
		t.Fatalf("redeem while the check cannot answer: %v, want %v", err, down)
	}
	q.failing = nil
	gr, err := s.RedeemUI(ctx, "first", "i1")
	if err != nil || gr.UserID != "ann" || gr.Port != 8080 {
		t.Fatalf("the retry: %+v %v", gr, err)
	}
	invalid("the code again", "first")

	// Refused (no role), the code is used up all the same.
	q.bindings["ann"] = nil
	invalid("without a role", "second")
	q.bindings["ann"] = []iam.RoleBinding{viewer}
	invalid("the refused code, with the role back", "second")
}
