package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/client"
)

// `gpuaas instance member` against a real server and a real in-process
// agent (on a fake driver): an app whose version declares no members
// refuses `member add` with the server's reason, `member list` shows the
// instance's own workload, and a cluster app's instance is given a worker
// with --wait, which is then removed with --wait (verified on its node).
func TestInstanceMemberCLI(t *testing.T) {
	c := newCLIApps(t)
	run, must, f := c.run, c.must, c.f

	// Two apps, each pushed, verified, promoted, registered, published and
	// entitled through the CLI: "solo" declares no members, "cluster"
	// allows up to two workers.
	c.publish(t, "solo", nil)
	c.publish(t, "cluster", func(m map[string]any) {
		m["runtime_profile"].(map[string]any)["members"] = map[string]any{"roles": []string{"worker"}, "max_count": 2}
	})
	alloc := c.allocate(t)
	launch := func(slug string) string {
		t.Helper()
		var inst client.AppInstance
		if err := json.Unmarshal([]byte(must("instance", "create", slug, "1.0.0", "--allocation", alloc, "--wait", "-o", "json")), &inst); err != nil || inst.Status != "running" {
			t.Fatalf("instance create %s: %v %+v", slug, err, inst)
		}
		return inst.ID
	}

	// A version without members: add is refused with the server's reason,
	// and exits non-zero.
	solo := launch("solo")
	code, out, stderr := run("", "instance", "member", "add", solo, "--role", "worker")
	if code != exitError || out != "" || !strings.Contains(stderr, "members_not_supported") || !strings.Contains(stderr, "runtime_profile.members") ||
		!strings.Contains(stderr, "/role") {
		t.Fatalf("member add on solo: exit %d, stdout %q, stderr:\n%s", code, out, stderr)
	}
	// The listing shows the instance's own workload.
	table := must("instance", "member", "list", solo, "-o", "table")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "ID NAME ROLE ADDED STATUS REASON NODE" {
		t.Fatalf("member list table:\n%s", table)
	}
	if row := strings.Fields(lines[1]); len(row) != 6 || row[2] != "primary" || row[3] != "no" || row[4] != "running" || row[5] != f.Agents[0].NodeID {
		t.Fatalf("own workload row: %q", lines[1])
	}
	var page client.CatalogPage[client.AppInstanceMember]
	if err := json.Unmarshal([]byte(must("instance", "members", "list", solo, "-o", "json")), &page); err != nil || len(page.Items) != 1 || page.Items[0].Added {
		t.Fatalf("member list -o json: %v %+v", err, page)
	}
	own := page.Items[0].ID
	// The own workload is not removed by itself; unknown ids are named.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"remove", solo, own}, "member_not_added"},
		{[]string{"recover", solo, "no-such-member"}, "app_instance_member_not_found (HTTP 404)"},
		{[]string{"list", "no-such-instance"}, "(HTTP 404)"},
		{[]string{"add", "no-such-instance", "--role", "worker"}, "(HTTP 404)"},
	} {
		if code, _, stderr := run("", append([]string{"instance", "member"}, c.args...)...); code != exitError || !strings.Contains(stderr, c.want) {
			t.Errorf("member %v: exit %d, want %q in:\n%s", c.args, code, c.want, stderr)
		}
	}

	// A cluster app: add a worker and wait until it runs, then remove it
	// and wait until its removal is verified.
	cluster := launch("cluster")
	code, out, stderr = run("", "instance", "member", "add", cluster, "--role", "worker", "--wait", "-o", "table")
	if code != exitOK || !strings.Contains(out, " succeeded") || !strings.Contains(stderr, "in progress") {
		t.Fatalf("member add --wait: exit %d\n%s\n%s", code, out, stderr)
	}
	worker := ""
	for _, l := range strings.Split(out, "\n") {
		if fs := strings.Fields(l); len(fs) == 6 && fs[1] == "worker-1" {
			if fs[2] != "worker" || fs[3] != "yes" || fs[4] != "running" {
				t.Fatalf("added worker row: %q", l)
			}
			worker = fs[0]
		}
	}
	if worker == "" {
		t.Fatalf("member add --wait prints no worker-1 row:\n%s", out)
	}
	var mo client.MemberOperation
	if err := json.Unmarshal([]byte(must("instance", "member", "remove", cluster, worker, "--wait", "-o", "json")), &mo); err != nil ||
		mo.Operation.State != "succeeded" || len(mo.Members) != 1 || mo.Members[0].ID != worker || mo.Members[0].Status != "removed" {
		t.Fatalf("member remove --wait: %v %+v", err, mo)
	}
	// Without --wait the answer is the operation and the new members,
	// deploying.
	if err := json.Unmarshal([]byte(must("instance", "member", "add", cluster, "--role", "worker", "-o", "json")), &mo); err != nil ||
		mo.OperationID == "" || mo.Operation.ID != mo.OperationID || len(mo.Members) != 1 || mo.Members[0].Name != "worker-2" || mo.Members[0].Status != "deploying" {
		t.Fatalf("member add: %v %+v", err, mo)
	}
	f.Must(f.Until(c.ctx, "worker-2 to run", func() bool {
		var page client.CatalogPage[client.AppInstanceMember]
		_ = json.Unmarshal([]byte(must("instance", "member", "list", cluster, "-o", "json")), &page)
		for _, m := range page.Items {
			if m.Name == "worker-2" {
				return m.Status == "running"
			}
		}
		return false
	}))
	// A member that has not failed is not recovered.
	if code, _, stderr := run("", "instance", "member", "recover", cluster, worker); code != exitError || !strings.Contains(stderr, "only a failed member") {
		t.Fatalf("recover a removed member: exit %d\n%s", code, stderr)
	}

	// The help says what happens.
	for _, c := range []struct {
		cmd  string
		want []string
	}{
		{"add", []string{"runtime_profile.members", "Asynchronous", "--wait"}},
		{"remove", []string{"verified", "Asynchronous"}},
		{"recover", []string{"Only a failed member"}},
	} {
		if help := must("instance", "member", c.cmd, "--help"); !containsAll(help, c.want) {
			t.Errorf("instance member %s --help:\n%s", c.cmd, help)
		}
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
