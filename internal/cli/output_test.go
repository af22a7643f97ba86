package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// Every verb of every noun inherits -o, and every --project takes a slug
// and falls back to GPUAAS_PROJECT_ID (one flag helper, one resolver).
func TestEveryVerbHasOutputAndProjectFlags(t *testing.T) {
	t.Parallel()
	root := NewRoot(&bytes.Buffer{}, &bytes.Buffer{})
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.HasSubCommands() {
			if c.Flag("output") == nil && c.InheritedFlags().Lookup("output") == nil {
				t.Errorf("%s has no -o", c.CommandPath())
			}
			if f := c.Flag("project"); f != nil && !strings.Contains(f.Usage, "GPUAAS_PROJECT_ID") {
				t.Errorf("%s --project ignores GPUAAS_PROJECT_ID", c.CommandPath())
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

func TestOutputFormatsAndSlugs(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	dir := t.TempDir()
	t.Setenv(envConfigDir, filepath.Join(dir, "config"))
	t.Setenv(envAPIURL, s.URL)
	t.Setenv(envToken, "")
	t.Setenv(envProfile, "")
	t.Setenv("GPUAAS_PROJECT_ID", "")
	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		root := NewRoot(&out, &errOut)
		root.SetIn(strings.NewReader(s.Creds.AdminPassword + "\n"))
		root.SetArgs(args)
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("gpuaas %s: %v\n%s", strings.Join(args, " "), describeError(nil, err), errOut.String())
		}
		return out.String()
	}
	run("login", "--email", s.Creds.AdminEmail, "--password-stdin")
	created := run("sa", "create", "--project", "dev", "--name", "publisher", "--slug", "publisher", "--key-file", filepath.Join(dir, "p.json"), "-o", "json")
	var sa struct{ ID string }
	if err := json.Unmarshal([]byte(created), &sa); err != nil || sa.ID == "" {
		t.Fatalf("sa create -o json: %v %s", err, created)
	}

	// Slugs wherever ids are: the project by slug (and ORG/PROJECT), the account by slug.
	for _, project := range []string{"dev", "dev/dev", s.Creds.ProjectID} {
		var got struct{ ID string }
		if err := json.Unmarshal([]byte(run("sa", "get", "publisher", "--project", project, "-o", "json")), &got); err != nil || got.ID != sa.ID {
			t.Fatalf("sa get publisher --project %s: %v %+v", project, err, got)
		}
	}
	// --org takes a slug (or GPUAAS_ORG_ID) wherever it is a flag.
	var org struct{ ID string }
	if err := json.Unmarshal([]byte(run("org", "get", "dev", "-o", "json")), &org); err != nil || org.ID != s.Creds.OrgID {
		t.Fatalf("org get dev: %v %+v; want %s", err, org, s.Creds.OrgID)
	}
	created = run("project", "create", "--org", "dev", "--slug", "second", "--name", "Second", "-o", "json")
	var second struct {
		ID    string
		OrgID string `json:"org_id"`
	}
	if err := json.Unmarshal([]byte(created), &second); err != nil || second.OrgID != s.Creds.OrgID {
		t.Fatalf("project create --org dev: %v %s", err, created)
	}
	var projects struct{ Items []struct{ Slug string } }
	if err := json.Unmarshal([]byte(run("project", "list", "--org", "dev", "-o", "json")), &projects); err != nil || len(projects.Items) != 2 {
		t.Fatalf("project list --org dev: %v %+v", err, projects)
	}
	t.Setenv("GPUAAS_ORG_ID", "dev")
	if out := run("project", "get", "dev/second", "-o", "json"); !strings.Contains(out, second.ID) {
		t.Fatalf("project get dev/second: %s", out)
	}
	for _, args := range [][]string{{"events", "list", "--org", "dev"}, {"usage"}, {"billing", "ledger", "--org", "dev"}, {"billing", "costs"}} {
		if out := run(append(args, "-o", "json")...); !json.Valid([]byte(out)) {
			t.Fatalf("%v -o json: %s", args, out)
		}
	}
	t.Setenv("GPUAAS_ORG_ID", "")
	// GPUAAS_PROJECT_ID (id or slug) stands in for --project on every noun.
	t.Setenv("GPUAAS_PROJECT_ID", "dev")
	for _, args := range [][]string{{"sa", "list"}, {"artifact", "list"}, {"artifact", "signing-key", "list"}, {"app", "entitlements"}, {"app", "catalog"},
		{"instance", "list"}, {"allocation", "list"}, {"events", "list"}, {"usage"}, {"billing", "ledger"}, {"project", "get"}} {
		out := run(append(args, "-o", "json")...)
		if !json.Valid([]byte(out)) {
			t.Fatalf("%v -o json: %s", args, out)
		}
	}

	// The same result in each format.
	var y map[string]any
	if err := yaml.Unmarshal([]byte(run("sa", "get", "publisher", "-o", "yaml")), &y); err != nil || y["id"] != sa.ID {
		t.Fatalf("-o yaml: %v %v", err, y)
	}
	table := run("sa", "list", "-o", "table")
	if !strings.Contains(table, "SLUG") || !strings.Contains(table, "publisher") || strings.Contains(table, "{") {
		t.Fatalf("-o table: %s", table)
	}
	if out := run("auth", "status", "-o", "table"); !strings.Contains(out, "default") || !strings.Contains(out, "user:"+s.Creds.AdminEmail) {
		t.Fatalf("auth status table: %s", out)
	}
	// A slug nobody can see is an error naming it.
	var out, errOut bytes.Buffer
	root := NewRoot(&out, &errOut)
	root.SetArgs([]string{"sa", "get", "publisher", "--project", "nope"})
	if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown project slug: %v", err)
	}
}

// The verbs that act on this machine print their result like every other
// verb: -o json (or a pipe) gets a document, a person gets one line on stderr.
func TestLocalVerbsPrintResults(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	run := cliAgainst(t, s)
	var p profileView
	out, errOut, err := run(s.Creds.AdminPassword+"\n", "login", "--email", s.Creds.AdminEmail, "--password-stdin", "--profile", "admin", "-o", "json")
	if err != nil || json.Unmarshal([]byte(out), &p) != nil || p.Name != "admin" || !p.Active || p.Principal != "user:"+s.Creds.AdminEmail ||
		!strings.Contains(errOut, "Signed in") || strings.Contains(out, "access_token") {
		t.Fatalf("login -o json: %v\n%s\n%s", err, out, errOut)
	}
	if out, _, err = run(s.Creds.AdminPassword+"\n", "login", "--email", s.Creds.AdminEmail, "--password-stdin", "--profile", "other", "-o", "yaml"); err != nil || !strings.Contains(out, "name: other") {
		t.Fatalf("login -o yaml: %v %s", err, out)
	}
	if out, _, err = run("", "auth", "use", "admin", "-o", "json"); err != nil || json.Unmarshal([]byte(out), &p) != nil || p.Name != "admin" || !p.Active {
		t.Fatalf("auth use -o json: %v %s", err, out)
	}
	var gone struct {
		LoggedOut []string `json:"logged_out"`
		Active    string
	}
	if out, _, err = run("", "logout", "other", "-o", "json"); err != nil || json.Unmarshal([]byte(out), &gone) != nil ||
		!slices.Equal(gone.LoggedOut, []string{"other"}) || gone.Active != "admin" {
		t.Fatalf("logout other -o json: %v %s", err, out)
	}

	// manifest validate: one report document; problems still reach stderr as FILE:LINE lines.
	valid := filepath.Join("..", "..", "examples", "manifests", "slurm-reference.yaml")
	var r struct {
		Valid    bool
		Versions []struct{ Digest string }
		Problems []struct{ Pointer string }
	}
	if out, _, err = run("", "manifest", "validate", valid, "-o", "json"); err != nil || json.Unmarshal([]byte(out), &r) != nil || !r.Valid ||
		len(r.Versions) != 1 || !strings.HasPrefix(r.Versions[0].Digest, "sha256:") {
		t.Fatalf("manifest validate -o json: %v %s", err, out)
	}
	invalid := filepath.Join("..", "manifest", "testdata", "invalid", "bad-slug.json")
	out, errOut, err = run("", "manifest", "validate", invalid, "-o", "json")
	if err == nil || json.Unmarshal([]byte(out), &r) != nil || r.Valid || len(r.Problems) == 0 || r.Problems[0].Pointer != "/slug" ||
		!strings.Contains(errOut, invalid+":2: /slug:") {
		t.Fatalf("invalid manifest -o json: %v\n%s\n%s", err, out, errOut)
	}
	if out, _, _ = run("", "manifest", "validate", invalid, "-o", "table"); !strings.HasPrefix(out, invalid+":2: /slug:") {
		t.Fatalf("invalid manifest -o table: %s", out)
	}
}
