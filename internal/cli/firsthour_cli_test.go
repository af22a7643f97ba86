package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/gpuaas/gpuaas/internal/buildinfo"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// exitRunner runs the command line as the binary does (Run: the exit
// status, the message on stderr) against s with a fresh config dir.
func exitRunner(t *testing.T, s *servertest.Server) func(stdin string, args ...string) (int, string, string) {
	t.Helper()
	cliAgainst(t, s) // the environment: this server, no profile, no token
	return func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := Run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
		return code, out.String(), errOut.String()
	}
}

// jsonField is a string field of a JSON object.
func jsonField(t *testing.T, out, field string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	v, _ := m[field].(string)
	if v == "" {
		t.Fatalf("no %s in %s", field, out)
	}
	return v
}

// The first hour's messages (issue 23, item 10): each names the CLI's next
// step (not a REST path), says what is wrong in terms of what was typed,
// and exits with the documented status (0 ok, 1 error, 2 usage).
func TestFirstHourMessages(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	s.App.API.Catalog.SetArtifactGate(nil)
	run := exitRunner(t, s)
	pid := s.Creds.ProjectID
	admin := s.Admin().Token
	want := func(name string, code int, gotCode int, stderr string, wants []string, nots ...string) {
		t.Helper()
		if gotCode != code {
			t.Errorf("%s: exit status %d, want %d; stderr:\n%s", name, gotCode, code, stderr)
		}
		for _, w := range wants {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", name, w, stderr)
			}
		}
		for _, n := range nots {
			if strings.Contains(stderr, n) {
				t.Errorf("%s: stderr has %q:\n%s", name, n, stderr)
			}
		}
	}

	// Usage errors exit 2 and nothing runs.
	code, out, stderr := run("")
	want("bare gpuaas", exitUsage, code, stderr, []string{"no command given", "Available Commands"})
	if out != "" {
		t.Errorf("bare gpuaas printed help on stdout: %q", out)
	}
	code, out, stderr = run("", "--version")
	want("--version", exitOK, code, stderr, nil)
	if out != "gpuaas "+buildinfo.Read().Version+"\n" {
		t.Errorf("--version printed %q", out)
	}
	code, _, stderr = run("", "app", "publish", "--token", admin)
	want("missing arguments", exitUsage, code, stderr, []string{"missing APP VERSION", "usage: gpuaas app publish APP VERSION"}, "arg(s)")
	code, _, stderr = run("", "app", "publish", "my-app", "--token", admin)
	want("one missing argument", exitUsage, code, stderr, []string{"missing VERSION"})
	code, _, stderr = run("", "whoami", "extra")
	want("extra argument", exitUsage, code, stderr, []string{`gpuaas whoami takes no arguments, got "extra"`})
	code, _, stderr = run("", "artifact", "list", "--projet", pid)
	want("flag typo", exitUsage, code, stderr, []string{"unknown flag: --projet", "did you mean --project?", "see gpuaas artifact list --help"})
	code, _, stderr = run("", "instance", "create", "--gpu", "2")
	want("flag typo", exitUsage, code, stderr, []string{"did you mean --gpus?"})
	code, _, stderr = run("", "artifact", "lst")
	want("unknown command", exitUsage, code, stderr, []string{"did you mean get or list?"})

	// An API URL without a scheme is named as such, not a URL-parse error.
	code, _, stderr = run("", "whoami", "--api-url", "127.0.0.1:8080")
	want("API URL without scheme", exitError, code, stderr, []string{`API URL "127.0.0.1:8080" is not an http:// or https:// URL`, "--api-url or GPUAAS_API_URL"},
		"first path segment", "missing protocol scheme")

	// A wrong password is a failed sign-in, not "not signed in".
	code, _, stderr = run("wrong\n", "login", "--email", s.Creds.AdminEmail, "--password-stdin")
	want("wrong password", exitError, code, stderr, []string{"sign-in failed: email or password is wrong", "invalid_credentials"}, "not signed in", "run gpuaas login")

	// A refused GPUAAS_TOKEN says it overrides the profile.
	t.Setenv(envToken, "not-a-token")
	code, _, stderr = run("", "whoami")
	want("bad GPUAAS_TOKEN", exitError, code, stderr, []string{"the token in GPUAAS_TOKEN was refused (GPUAAS_TOKEN overrides the profile's token): unset it"})
	code, _, stderr = run("", "whoami", "--token", "also-bad")
	want("bad --token", exitError, code, stderr, []string{"the token given with --token was refused"})
	t.Setenv(envToken, "")
	code, _, stderr = run("", "whoami")
	want("no token", exitError, code, stderr, []string{"not signed in", "run gpuaas login"})

	if code, _, stderr = run(s.Creds.AdminPassword+"\n", "login", "--email", s.Creds.AdminEmail, "--password-stdin"); code != 0 {
		t.Fatalf("login: %d %s", code, stderr)
	}

	// Server refusals name the CLI command (and, for API users, the path).
	file := filepath.Join("..", "..", "examples", "manifests", "slurm-reference.yaml")
	if code, _, stderr = run("", "manifest", "register", file); code != 0 {
		t.Fatalf("register: %s", stderr)
	}
	code, _, stderr = run("", "app", "publish", "slurm-reference", "9.9.9", "--reason", "x")
	want("unknown version", exitError, code, stderr, []string{"list its versions with gpuaas app versions slurm-reference"})
	code, _, stderr = run("", "app", "versions", "no-such-app")
	want("unknown app", exitError, code, stderr, []string{"list apps with gpuaas app list"})
	code, _, stderr = run("", "app", "preview", "slurm-reference", "24.05.0", "--project", pid)
	want("not entitled", exitError, code, stderr, []string{"gpuaas app entitle slurm-reference --project " + pid})
	code, _, stderr = run("", "billing", "budget", "get", "--project", pid)
	want("no budget", exitError, code, stderr, []string{"gpuaas billing budget set --project " + pid}, "an org admin sets one with PUT")
	code, _, stderr = run("", "billing", "ledger", "--project", pid, "--group-by", "usage_unit")
	want("ledger grouping", exitUsage, code, stderr, []string{"unknown flag: --group-by"})

	// An artifact that needs a signature and has none: the failed verify
	// says why once, and how to sign it.
	dir := t.TempDir()
	if code, _, stderr = run("", "artifact", "keygen", "--out", filepath.Join(dir, "ci")); code != 0 {
		t.Fatalf("keygen: %s", stderr)
	}
	if code, _, stderr = run("", "artifact", "signing-key", "add", "--project", pid, "--name", "ci", "--public-key-file", filepath.Join(dir, "ci.pub")); code != 0 {
		t.Fatalf("signing-key add: %s", stderr)
	}
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(dir, "image.tar")
	if err := tarball.WriteToFile(tarPath, name.MustParseReference("example.com/hello:local"), img); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = run("", "artifact", "push", tarPath, "--project", pid, "--app", "hello", "--version", "1.0.0", "-o", "json")
	if code != 0 {
		t.Fatalf("push: %s", stderr)
	}
	id := jsonField(t, out, "id")
	code, _, stderr = run("", "artifact", "verify", id, "--project", pid, "-o", "json")
	want("failed verify", exitError, code, stderr, []string{"verification of " + id + " failed: signature_missing (", "gpuaas artifact sign " + id + " --sign-key KEY"})
	if strings.Count(stderr, "signature_missing") != 1 {
		t.Errorf("failed verify repeats the reason:\n%s", stderr)
	}
	code, _, stderr = run("", "artifact", "promote", id, "--project", pid, "--to", "retired", "--reason", "x")
	want("promote to retired", exitError, code, stderr, []string{"gpuaas artifact deprecate or retire"}, "endpoints")

	// A single object's table shows nested fields as rows and a PEM as lines.
	code, out, stderr = run("", "artifact", "get", id, "--project", pid, "-o", "table")
	if code != 0 || !strings.Contains(out, "trust_reason:") || strings.Contains(out, `\n`) {
		t.Errorf("artifact get -o table: %d %q %s", code, out, stderr)
	}

	// usage grouped by the unit shows the unit once.
	code, out, stderr = run("", "usage", "--project", pid, "--group-by", "usage_unit", "-o", "table")
	if code != 0 || strings.Count(out, "USAGE_UNIT") != 1 {
		t.Errorf("usage --group-by usage_unit: %d %q %s", code, out, stderr)
	}
	code, out, _ = run("", "usage", "--project", pid, "--group-by", "usage_source", "-o", "table")
	if code != 0 || !strings.HasPrefix(out, "USAGE_SOURCE  USAGE_UNIT  QUANTITY  RECORDS") {
		t.Errorf("usage --group-by usage_source: %d %q", code, out)
	}
}

// A single object's table: nested objects as dotted rows, lists of scalars
// joined, multi-line strings (a PEM) one line per row, never escaped JSON.
func TestSingleObjectTable(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	pem := "-----BEGIN PUBLIC KEY-----\nMFkwEw\n-----END PUBLIC KEY-----\n"
	err := writeTable(&out, map[string]any{"id": "k1", "key": map[string]any{"public_key": pem, "alg": "ecdsa"},
		"tags": []any{"a", "b"}, "ports": []any{map[string]any{"name": "http", "port": 8080}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, w := range []string{"key.alg:         ecdsa\n", "key.public_key:  -----BEGIN PUBLIC KEY-----\n", "                 MFkwEw\n",
		"tags:            a, b\n", "ports[0].name:   http\n", "ports[0].port:   8080\n"} {
		if !strings.Contains(s, w) {
			t.Errorf("missing %q in:\n%s", w, s)
		}
	}
	if strings.Contains(s, `\n`) || strings.Contains(s, "{") {
		t.Errorf("escaped or JSON values in:\n%s", s)
	}
}

// events watch prints a table on request and, with --from-now, only what
// happens after it connects.
func TestEventsWatchTableFromNow(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	cliAgainst(t, s)
	pid := s.Creds.ProjectID
	s.App.API.Catalog.SetArtifactGate(nil)
	admin := s.Admin()
	for _, m := range []string{"slurm-reference.yaml", "jupyter-cuda-dev.json"} {
		if _, errOut, err := runCLI(t, "manifest", "register", filepath.Join("..", "..", "examples", "manifests", m), "--token", admin.Token); err != nil {
			t.Fatalf("register %s: %v %s", m, err, errOut)
		}
	}
	// Something in the project's history first.
	admin.Do("PUT", "/api/v1/projects/"+pid+"/apps/entitlements/jupyter-cuda-dev", map[string]any{"enabled": true}).Want(t, 200)
	s.SettleEvents()

	watch := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		var out testbin.Output
		var errOut bytes.Buffer
		done := make(chan int)
		go func() {
			done <- Run(ctx, append([]string{"events", "watch", "--project", pid, "--token", admin.Token}, args...), strings.NewReader(""), &out, &errOut)
		}()
		// The stream is connected once the watcher has printed or waited a
		// moment; then a new event happens.
		time.Sleep(500 * time.Millisecond)
		admin.Do("PUT", "/api/v1/projects/"+pid+"/apps/entitlements/slurm-reference", map[string]any{"enabled": true}).Want(t, 200)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && strings.Count(out.String(), "apps.entitlement.updated") < 1+strings.Count(strings.Join(args, " "), "json") {
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("events watch %v: exit %d %s", args, code, errOut.String())
		}
		return out.String()
	}
	got := watch("--from-now", "-o", "table")
	if !strings.HasPrefix(got, "TIME") || !strings.Contains(got, "SEQUENCE") || !strings.Contains(got, "apps.entitlement.updated") {
		t.Fatalf("table: %q", got)
	}
	if strings.Count(got, "\n") != 2 {
		t.Fatalf("--from-now printed history: %q", got)
	}
	got = watch("-o", "json")
	if !strings.Contains(got, "jupyter-cuda-dev") || !strings.Contains(got, "slurm-reference") {
		t.Fatalf("watch from the start lacks history: %q", got)
	}
	if _, _, err := runCLI(t, "events", "watch", "--project", pid, "--from-now", "--after", "1"); err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Fatalf("--from-now with --after: %v", err)
	}
}
