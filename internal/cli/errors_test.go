package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/client"
)

// An unknown subcommand is an error (with a suggestion), never help and exit 0.
func TestUnknownSubcommandIsAnError(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"artifact", "lst"}, {"sa", "nope"}, {"auth", "stats"}, {"nosuch"}} {
		var out, errOut bytes.Buffer
		root := NewRoot(&out, &errOut)
		root.SetArgs(args)
		err := root.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), "unknown command") {
			t.Fatalf("gpuaas %v: %v (out %q)", args, err, out.String())
		}
	}
	var out bytes.Buffer
	root := NewRoot(&out, &out)
	root.SetArgs([]string{"artifact", "lst"})
	if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "list?") {
		t.Fatalf("no suggestion: %v", err)
	}
	// Without a subcommand a group prints its help and succeeds.
	out.Reset()
	root = NewRoot(&out, &out)
	root.SetArgs([]string{"artifact"})
	if err := root.ExecuteContext(context.Background()); err != nil || !strings.Contains(out.String(), "Available Commands") {
		t.Fatalf("gpuaas artifact: %v %s", err, out.String())
	}
}

// Errors read as CLI errors with the next step and the correlation id.
func TestDescribeError(t *testing.T) {
	e := &client.APIError{Status: 401, Code: "unauthenticated", Message: "missing bearer token", CorrelationID: "c-1"}
	if s := describeError(nil, e); !strings.Contains(s, "not signed in") || !strings.Contains(s, "gpuaas login") || !strings.Contains(s, "correlation_id: c-1") {
		t.Fatalf("401: %s", s)
	}
	// Field errors print one per line, not again in the headline.
	e = &client.APIError{Status: 400, Code: "validation_failed", Message: "invalid request: /resources/gpu_count must be at most 2",
		Details: map[string]any{"fields": []any{map[string]any{"field": "/resources/gpu_count", "code": "out_of_range", "message": "must be at most 2"}}}}
	if s := describeError(nil, e); !strings.HasPrefix(s, "invalid request\n") || strings.Count(s, "must be at most 2") != 1 ||
		!strings.Contains(s, "\n  /resources/gpu_count: must be at most 2 (out_of_range)") {
		t.Fatalf("fields: %s", s)
	}
	// Nothing listens there.
	addr := refusedAddr(t)
	t.Setenv(envConfigDir, t.TempDir())
	t.Setenv(envToken, "")
	var out, errOut bytes.Buffer
	root := NewRoot(&out, &errOut)
	root.SetArgs([]string{"sa", "list", "--project", "p", "--api-url", "http://" + addr})
	err := root.ExecuteContext(context.Background())
	if s := describeError(nil, err); !strings.Contains(s, "cannot reach the API at http://"+addr) || !strings.Contains(s, "is gpuaas dev running?") {
		t.Fatalf("unreachable: %s", s)
	}
	// A bad -o is refused before anything runs.
	root = NewRoot(&out, &errOut)
	root.SetArgs([]string{"auth", "status", "-o", "xml"})
	if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "unknown output format") {
		t.Fatalf("-o xml: %v", err)
	}
}

// The publish gate's refusal prints, per artifact, the pin and what is registered.
func TestDescribePublishGate(t *testing.T) {
	t.Parallel()
	e := &client.APIError{Status: 409, Code: "artifacts_not_ready", Message: "my-app 1.0.0: artifact(s) runtime are not ready", CorrelationID: "c-2",
		Details: map[string]any{"artifacts": []any{map[string]any{"name": "runtime", "expected_repository": "gpuaas/apps/o/p/my-app", "expected_digest": "",
			"problem":    "a1 is draft and unverified: verify it and promote it to active",
			"registered": []any{map[string]any{"id": "a1", "lifecycle_state": "draft", "trust_state": "unverified", "digest": "sha256:ab", "repository": "gpuaas/apps/o/p/my-app"}}}}}}
	s := describeError(nil, e)
	for _, want := range []string{"artifact runtime: expected repository gpuaas/apps/o/p/my-app", "registered a1: state draft, trust unverified, gpuaas/apps/o/p/my-app@sha256:ab", "problem: a1 is draft", "correlation_id: c-2"} {
		if !strings.Contains(s, want) {
			t.Fatalf("missing %q in:\n%s", want, s)
		}
	}
}
