package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
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
			t.Fatalf("gpuaas %s: %v\n%s", strings.Join(args, " "), describeError(err), errOut.String())
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
	// --org takes a slug through the same resolver.
	api, err := apiClient(NewRoot(&bytes.Buffer{}, &bytes.Buffer{}))
	if err != nil {
		t.Fatal(err)
	}
	if id, err := resolveOrg(context.Background(), api, "dev"); err != nil || id != s.Creds.OrgID {
		t.Fatalf("resolveOrg(dev) = %q, %v; want %s", id, err, s.Creds.OrgID)
	}
	// GPUAAS_PROJECT_ID (id or slug) stands in for --project on every noun.
	t.Setenv("GPUAAS_PROJECT_ID", "dev")
	for _, args := range [][]string{{"sa", "list"}, {"artifact", "list"}, {"artifact", "signing-key", "list"}, {"app", "entitlements"}, {"app", "catalog"}} {
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
