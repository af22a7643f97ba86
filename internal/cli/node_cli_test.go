package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// The operator's path: mint a join token, see no nodes yet, and find that
// an allocation without a node is refused with a clear error; listing the
// project's allocations works for its members.
func TestNodeAndAllocationCommands(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	run := cliAgainst(t, s)
	if _, _, err := run(s.Creds.AdminPassword+"\n", "login", "--email", s.Creds.AdminEmail, "--password-stdin"); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := run("", "node", "join-token", "--description", "rack 1")
	if err != nil {
		t.Fatal(err)
	}
	var jt struct {
		JoinToken string `json:"join_token"`
	}
	if json.Unmarshal([]byte(out), &jt) != nil || !strings.HasPrefix(jt.JoinToken, "gpjt_") || !strings.Contains(stderr, "works once") {
		t.Fatalf("join-token: %s / %s", out, stderr)
	}
	if out, _, err := run("", "node", "list"); err != nil || !strings.Contains(out, `"items": []`) {
		t.Fatalf("node list: %v %s", err, out)
	}
	_, _, err = run("", "allocation", "create", "--project", s.Creds.ProjectID, "--sku", "h100-80gb.1x")
	if err == nil || !strings.Contains(err.Error(), "insufficient_capacity") && !strings.Contains(err.Error(), "no ready node") {
		t.Fatalf("allocation create without nodes: %v", err)
	}
	if out, _, err := run("", "allocation", "list", "--project", s.Creds.ProjectID); err != nil || !strings.Contains(out, `"items": []`) {
		t.Fatalf("allocation list: %v %s", err, out)
	}
}

// A refused join speaks of the join token only: the agent has no profile,
// so the CLI's sign-in advice must not precede the server's message.
func TestAgentRefusedJoinNamesTheJoinTokenOnly(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"agent", "--server", s.URL, "--join-token", "gpjt_not-a-real-token",
		"--data-dir", t.TempDir(), "--name", "refused"}, strings.NewReader(""), &out, &errOut)
	msg := errOut.String()
	if code != exitError || !strings.Contains(msg, "join token is unknown, expired or already used") ||
		!strings.Contains(msg, "invalid_join_token") {
		t.Fatalf("exit %d, stderr %q", code, msg)
	}
	for _, wrong := range []string{"gpuaas login", "not signed in", "sa token"} {
		if strings.Contains(msg, wrong) {
			t.Fatalf("the agent's refusal mentions %q: %q", wrong, msg)
		}
	}
}
