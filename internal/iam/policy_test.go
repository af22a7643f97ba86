package iam

import (
	"testing"

	"github.com/gpuaas/gpuaas/internal/principal"
)

func grants(p principal.Principal, bs ...RoleBinding) *Grants {
	return &Grants{P: p, bindings: bs}
}

func TestPolicyScopes(t *testing.T) {
	user := principal.Principal{Type: principal.User, ID: "u"}
	orgA, orgB := "org-a", "org-b"
	pA1, pA2, pB := Scope{OrgID: orgA, ProjectID: "a1"}, Scope{OrgID: orgA, ProjectID: "a2"}, Scope{OrgID: orgB, ProjectID: "b"}

	viewer := grants(user, RoleBinding{Role: RoleProjectViewer, ScopeType: ScopeProject, ScopeID: "a1", OrgID: orgA})
	if !viewer.Can(PermInstanceRead, pA1) || viewer.Can(PermInstanceCreate, pA1) {
		t.Fatal("viewer: read yes, create no")
	}
	if viewer.Sees(pA2) || viewer.Can(PermInstanceRead, pA2) {
		t.Fatal("a project binding must not reach a sibling project")
	}
	if !viewer.Sees(Scope{OrgID: orgA}) || viewer.Sees(Scope{OrgID: orgB}) {
		t.Fatal("a project member sees its org and no other")
	}

	orgAdmin := grants(user, RoleBinding{Role: RoleOrgAdmin, ScopeType: ScopeOrg, ScopeID: orgA, OrgID: orgA})
	for _, s := range []Scope{pA1, pA2, {OrgID: orgA}} {
		if !orgAdmin.Can(PermSAWrite, s) && s.ProjectID != "" {
			t.Fatalf("org admin lacks service_accounts.write at %+v", s)
		}
	}
	if orgAdmin.Sees(pB) || orgAdmin.Can(PermInstanceRead, pB) || orgAdmin.IsPlatformAdmin() {
		t.Fatal("org admin reaches another org or the platform")
	}
	if orgAdmin.ProjectIDsIn(orgA) != nil || len(orgAdmin.ProjectIDsIn(orgB)) != 0 {
		t.Fatal("org admin lists every project of its org and none of another")
	}

	platform := grants(user, RoleBinding{Role: RolePlatformAdmin, ScopeType: ScopePlatform})
	if !platform.IsPlatformAdmin() || !platform.Can(PermOrgsCreate, Scope{}) || !platform.Sees(pB) || platform.OrgIDs() != nil {
		t.Fatal("platform admin reaches everything")
	}
}

// Service accounts act only inside their own project, whatever bindings say.
func TestServiceAccountsAreConfined(t *testing.T) {
	sa := principal.Principal{Type: principal.ServiceAccount, ID: "sa", OrgID: "org-a", ProjectID: "a1"}
	g := grants(sa,
		RoleBinding{Role: RoleAppOperator, ScopeType: ScopeProject, ScopeID: "a1", OrgID: "org-a"},
		// A binding that should never exist for an SA must still not widen it.
		RoleBinding{Role: RolePlatformAdmin, ScopeType: ScopePlatform},
	)
	if !g.Can(PermInstanceCreate, Scope{OrgID: "org-a", ProjectID: "a1"}) {
		t.Fatal("SA cannot work in its own project")
	}
	for _, s := range []Scope{{}, {OrgID: "org-a"}, {OrgID: "org-a", ProjectID: "a2"}, {OrgID: "org-b", ProjectID: "b"}} {
		if g.Can(PermInstanceRead, s) || g.Sees(s) {
			t.Fatalf("SA reaches %+v", s)
		}
	}
	if g.IsPlatformAdmin() || len(g.OrgIDs()) != 0 {
		t.Fatal("SA has platform or org reach")
	}
	if ids := g.ProjectIDsIn("org-a"); len(ids) != 1 || ids[0] != "a1" {
		t.Fatalf("SA lists projects %v", ids)
	}
}

func TestEveryRoleIsBindableSomewhereAndPermissionsAreKnown(t *testing.T) {
	for _, r := range RoleNames() {
		if len(scopesOfRole[r]) == 0 {
			t.Errorf("role %s cannot be bound anywhere", r)
		}
		if len(RolePermissions(r)) == 0 {
			t.Errorf("role %s grants nothing", r)
		}
	}
	if RoleBindableAt(RolePlatformAdmin, ScopeProject) || RoleBindableAt(RoleOrgAdmin, ScopeProject) {
		t.Fatal("admin roles bindable below their level")
	}
}

func TestPasswordHashing(t *testing.T) {
	h, err := HashPassword("correct horse battery staple")
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := HashPassword("correct horse battery staple")
	if h == h2 {
		t.Fatal("hashes are not salted")
	}
	if ok, err := VerifyPassword(h, "correct horse battery staple"); !ok || err != nil {
		t.Fatalf("right password refused: %v", err)
	}
	if ok, _ := VerifyPassword(h, "correct horse battery stapler"); ok {
		t.Fatal("wrong password accepted")
	}
	if _, err := VerifyPassword("$bcrypt$whatever", "x"); err == nil {
		t.Fatal("foreign hash format accepted")
	}
}
