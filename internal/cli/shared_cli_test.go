package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/client"
)

// `gpuaas app worker` against a real server, as the platform admin: a
// service account created here is granted to an app (again: the same
// grant), listed, and revoked; an unknown account or app is refused with
// the server's 404 and a non-zero exit.
func TestAppWorkerCLI(t *testing.T) {
	c := loginCLI(t)
	s, run, must := c.s, c.run, c.must

	// The app an external worker drives (a draft is enough to grant).
	must("manifest", "register", filepath.Join("..", "..", "examples", "manifests", "slurm-reference.yaml"))
	var sa struct{ ID string }
	if err := json.Unmarshal([]byte(must("sa", "create", "--name", "slurm worker", "--slug", "slurm-worker",
		"--key-file", filepath.Join(t.TempDir(), "worker.json"), "-o", "json")), &sa); err != nil || sa.ID == "" {
		t.Fatalf("sa create: %v %+v", err, sa)
	}

	// Grant, and grant again: the same grant, of the account's project.
	var g client.AppWorkerGrant
	for range 2 {
		if err := json.Unmarshal([]byte(must("app", "worker", "grant", "slurm-reference", sa.ID, "-o", "json")), &g); err != nil ||
			g.AppSlug != "slurm-reference" || g.ServiceAccountID != sa.ID || g.ProjectID != s.Creds.ProjectID || g.GrantedBy == "" || g.CreatedAt == "" {
			t.Fatalf("app worker grant: %v %+v", err, g)
		}
	}
	if out := must("app", "worker", "grant", "slurm-reference", sa.ID, "-o", "table"); !strings.Contains(out, sa.ID) || !strings.Contains(out, "slurm-reference") {
		t.Fatalf("app worker grant -o table: %q", out)
	}
	table := must("app", "workers", "list", "slurm-reference", "-o", "table")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "SERVICE ACCOUNT PROJECT GRANTED BY GRANTED AT" {
		t.Fatalf("app worker list table:\n%s", table)
	}
	if row := strings.Fields(lines[1]); len(row) != 4 || row[0] != sa.ID || row[1] != s.Creds.ProjectID || row[2] != g.GrantedBy {
		t.Fatalf("grant row: %q", lines[1])
	}
	var page client.CatalogPage[client.AppWorkerGrant]
	if err := json.Unmarshal([]byte(must("app", "worker", "list", "slurm-reference", "--limit", "10", "-o", "json")), &page); err != nil ||
		len(page.Items) != 1 || page.Items[0] != g {
		t.Fatalf("app worker list -o json: %v %+v", err, page)
	}

	// Revoke: said on stderr, the result on stdout, and the list is empty.
	code, out, stderr := run("", "app", "worker", "revoke", "slurm-reference", sa.ID, "-o", "json")
	if code != exitOK || !strings.Contains(stderr, "Revoked service account "+sa.ID) || jsonField(t, out, "service_account_id") != sa.ID {
		t.Fatalf("app worker revoke: exit %d\n%s\n%s", code, out, stderr)
	}
	if err := json.Unmarshal([]byte(must("app", "worker", "list", "slurm-reference", "-o", "json")), &page); err != nil || len(page.Items) != 0 {
		t.Fatalf("app worker list after revoke: %v %+v", err, page)
	}

	// Unknown accounts and apps: the server's 404, a non-zero exit, nothing on stdout.
	unknown := uuid.NewString()
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"grant", "slurm-reference", unknown}, []string{"service account \"" + unknown + "\" does not exist", "service_account_not_found (HTTP 404)"}},
		{[]string{"grant", "no-such-app", sa.ID}, []string{"app_not_found (HTTP 404)"}},
	} {
		code, out, stderr := run("", append([]string{"app", "worker"}, c.args...)...)
		if code != exitError || out != "" || !containsAll(stderr, c.want) {
			t.Errorf("app worker %v: exit %d, stdout %q, want %q in:\n%s", c.args, code, out, c.want, stderr)
		}
	}

	// The help says what a grant is for.
	if help := must("app", "worker", "--help"); !containsAll(help, []string{"of any project", "external worker", "docs/external-workers.md", "platform admins"}) {
		t.Errorf("app worker --help:\n%s", help)
	}
	if help := must("app", "worker", "grant", "--help"); !containsAll(help, []string{"of any project", "external worker", "docs/external-workers.md"}) {
		t.Errorf("app worker grant --help:\n%s", help)
	}
}

// `gpuaas instance attach|detach|attachments` against a real server and a
// real in-process agent (on a fake driver), as the platform admin: an
// instance of one project (control_plane_scope project) lists no
// attachments and attach is refused with the server's not_tenant_shared;
// a tenant-shared instance (control_plane_scope tenant) is attached to a
// second project of the org (named by slug), seen there, listed, and
// detached.
func TestInstanceAttachCLI(t *testing.T) {
	c := newCLIApps(t)
	s, run, must := c.s, c.run, c.must

	// An app that may be launched for one project or for the org, pushed,
	// verified, promoted, registered, published and entitled through the CLI.
	c.publish(t, "shared", func(m map[string]any) {
		m["supported_modes"].(map[string]any)["control_plane_scopes"] = []string{"project", "tenant"}
	})
	alloc := c.allocate(t)
	launch := func(scope string) string {
		t.Helper()
		var inst client.AppInstance
		if err := json.Unmarshal([]byte(must("instance", "create", "shared", "1.0.0", "--name", "shared-"+scope, "--allocation", alloc,
			"--control-plane-scope", scope, "--wait", "-o", "json")), &inst); err != nil || inst.Status != "running" || inst.ControlPlaneScope != scope {
			t.Fatalf("instance create --control-plane-scope %s: %v %+v", scope, err, inst)
		}
		return inst.ID
	}
	var second struct{ ID string }
	if err := json.Unmarshal([]byte(must("project", "create", "--org", "dev", "--slug", "second", "--name", "Second", "-o", "json")), &second); err != nil || second.ID == "" {
		t.Fatalf("project create: %v %+v", err, second)
	}

	// An instance of one project: no attachments, and attach is refused
	// with the server's reason, exiting non-zero.
	own := launch("project")
	var page client.CatalogPage[client.AppInstanceAttachment]
	if err := json.Unmarshal([]byte(must("instance", "attachments", own, "-o", "json")), &page); err != nil || len(page.Items) != 0 {
		t.Fatalf("attachments of a project's instance: %v %+v", err, page)
	}
	code, out, stderr := run("", "instance", "attach", own, second.ID)
	if code != exitError || out != "" || !strings.Contains(stderr, "not_tenant_shared") || !strings.Contains(stderr, "control_plane_scope tenant") {
		t.Fatalf("attach a project's instance: exit %d, stdout %q, stderr:\n%s", code, out, stderr)
	}

	// A tenant-shared instance is the org's: launched only once the org is
	// entitled (an org admin's `app entitle --org`); then attach the second
	// project (by slug; again: the same attachment), which then sees it;
	// list; detach.
	code, out, stderr = run("", "instance", "create", "shared", "1.0.0", "--name", "too-early", "--allocation", alloc, "--control-plane-scope", "tenant")
	if code != exitError || out != "" || !containsAll(stderr, []string{"not_entitled", "app entitle shared --org " + s.Creds.OrgID}) {
		t.Fatalf("a tenant-shared launch before the org is entitled: exit %d, stdout %q, stderr:\n%s", code, out, stderr)
	}
	var ent client.Entitlement
	if err := json.Unmarshal([]byte(must("app", "entitle", "shared", "--org", s.Creds.OrgID, "-o", "json")), &ent); err != nil || ent.OrgID != s.Creds.OrgID || ent.ProjectID != "" || !ent.Enabled {
		t.Fatalf("app entitle --org: %v %+v", err, ent)
	}
	var ents client.CatalogPage[client.Entitlement]
	if err := json.Unmarshal([]byte(must("app", "entitlements", "--org", s.Creds.OrgID, "-o", "json")), &ents); err != nil || len(ents.Items) != 1 {
		t.Fatalf("app entitlements --org: %v %+v", err, ents)
	}
	shared := launch("tenant")
	var a client.AppInstanceAttachment
	for range 2 {
		if err := json.Unmarshal([]byte(must("instance", "attach", shared, "second", "-o", "json")), &a); err != nil ||
			a.AppInstanceID != shared || a.ProjectID != second.ID || a.OrgID != s.Creds.OrgID || a.AttachedBy == "" {
			t.Fatalf("instance attach: %v %+v", err, a)
		}
	}
	table := must("instance", "attachments", shared, "-o", "table")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "PROJECT ORG ATTACHED BY ATTACHED AT" {
		t.Fatalf("attachments table:\n%s", table)
	}
	if row := strings.Fields(lines[1]); len(row) != 4 || row[0] != second.ID || row[1] != s.Creds.OrgID || row[2] != a.AttachedBy {
		t.Fatalf("attachment row: %q", lines[1])
	}
	if out := must("instance", "get", shared, "--project", "second", "-o", "json"); jsonField(t, out, "id") != shared {
		t.Fatalf("the attached project's view of the shared instance: %s", out)
	}
	code, out, stderr = run("", "instance", "detach", shared, second.ID, "-o", "json")
	if code != exitOK || !strings.Contains(stderr, "Detached project "+second.ID) || jsonField(t, out, "project_id") != second.ID {
		t.Fatalf("instance detach: exit %d\n%s\n%s", code, out, stderr)
	}
	if err := json.Unmarshal([]byte(must("instance", "attachments", shared, "-o", "json")), &page); err != nil || len(page.Items) != 0 {
		t.Fatalf("attachments after detach: %v %+v", err, page)
	}
	// Detached, the second project no longer sees it; unknown ids are named.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"get", shared, "--project", "second"}, "(HTTP 404)"},
		{[]string{"detach", shared, second.ID}, "attachment_not_found (HTTP 404)"},
		{[]string{"attach", "no-such-instance", second.ID}, "(HTTP 404)"},
		{[]string{"attachments", "no-such-instance"}, "(HTTP 404)"},
	} {
		if code, _, stderr := run("", append([]string{"instance"}, c.args...)...); code != exitError || !strings.Contains(stderr, c.want) {
			t.Errorf("instance %v: exit %d, want %q in:\n%s", c.args, code, c.want, stderr)
		}
	}

	// The help says what is shared and who attaches.
	for _, c := range []string{"attach", "detach", "attachments"} {
		if help := must("instance", c, "--help"); !containsAll(help, []string{"control_plane_scope tenant", "platform-managed", "org-level role"}) {
			t.Errorf("instance %s --help:\n%s", c, help)
		}
	}
}
