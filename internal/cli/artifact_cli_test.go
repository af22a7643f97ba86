package cli

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// `gpuaas artifact` end to end against a real server: a project service
// account (signed in with `sa token`) pushes a docker-save tarball and a
// blob file — intent, push/upload, registration in one command each — and
// a person verifies, promotes and revokes through the CLI with reasons.
func TestArtifactCLI(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	dir := t.TempDir()
	pid := s.Creds.ProjectID
	run := cliAgainst(t, s)
	t.Setenv("GPUAAS_PROJECT_ID", pid)
	must := func(args ...string) (string, string) {
		t.Helper()
		out, errOut, err := run("", args...)
		if err != nil {
			t.Fatalf("gpuaas %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out, errOut
	}
	artifact := func(out, errOut string) client.AppArtifact {
		t.Helper()
		var a client.AppArtifact
		if err := json.Unmarshal([]byte(out), &a); err != nil || a.ID == "" {
			t.Fatalf("artifact output: %v %q (stderr %q)", err, out, errOut)
		}
		return a
	}
	intents := func() int {
		t.Helper()
		evs, _, err := s.DB.Queries().ListAudit(context.Background(),
			store.AuditFilter{Action: "artifact.publish_intent.create", Outcome: "success"}, store.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	loginAdmin := func() {
		t.Helper()
		if _, errOut, err := run(s.Creds.AdminPassword+"\n", "login", "--email", s.Creds.AdminEmail, "--password-stdin"); err != nil {
			t.Fatalf("login: %v %s", err, errOut)
		}
	}

	// The admin creates the project's publishing service account; the CLI
	// then acts as that account from its key file alone.
	loginAdmin()
	keyFile := filepath.Join(dir, "publisher.json")
	must("sa", "create", "--name", "publisher", "--slug", "publisher", "--key-file", keyFile)
	must("sa", "token", "--key-file", keyFile, "--activate")
	if c, err := loadCredentials(); err != nil || !strings.HasPrefix(c.Principal, "service_account:") {
		t.Fatalf("cached principal after sa token: %+v %v", c, err)
	}

	// An image built here, saved as `docker save` would.
	img, err := random.Image(1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	wantDigest, _ := img.Digest()
	tarPath := filepath.Join(dir, "image.tar")
	if err := tarball.WriteToFile(tarPath, name.MustParseReference("example.com/hello:local"), img); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, errOut := must("artifact", "push", tarPath, "--app", "hello", "--version", "1.2.0")
	ociTime := time.Since(start)
	oci := artifact(out, errOut)
	if oci.Digest != wantDigest.String() || oci.ArtifactKind != "oci" || oci.LifecycleState != "draft" || oci.TrustState != "unverified" ||
		!strings.HasPrefix(oci.Repository, "gpuaas/apps/") || oci.Tag == "" || oci.MediaType == "" {
		t.Fatalf("pushed image registered as %+v (want digest %s)", oci, wantDigest)
	}
	// Off a terminal, progress is whole lines with real byte counts.
	if !strings.Contains(errOut, "pushed ") || strings.Contains(errOut, "\r") || strings.Contains(errOut, "of 0 B") || !strings.Contains(errOut, "(100%)\n") {
		t.Fatalf("push progress on stderr: %q", errOut)
	}

	// A blob of a few MiB streams to project storage with progress, and is
	// registered with its sha256.
	blob := make([]byte, 3<<20+12345)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(blob)
	blobPath := filepath.Join(dir, "weights.bin")
	if err := os.WriteFile(blobPath, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	out, errOut = must("artifact", "push", blobPath, "--kind", "blob", "--name", "weights", "--app", "hello", "--version", "1.2.0")
	blobTime := time.Since(start)
	weights := artifact(out, errOut)
	if weights.Digest != "sha256:"+hex.EncodeToString(sum[:]) || weights.SizeBytes != int64(len(blob)) || weights.ArtifactKind != "blob" ||
		weights.SourceURI != "artifact_store://projects/"+pid+"/artifacts/hello/1.2.0/weights" {
		t.Fatalf("uploaded blob registered as %+v", weights)
	}
	if !strings.Contains(errOut, "uploaded 3.0 MiB of 3.0 MiB (100%)\n") || strings.Count(errOut, "uploaded ") > 5 {
		t.Fatalf("upload progress on stderr: %q", errOut)
	}

	// Bad inputs are named as such, and none mints a publish intent: a
	// missing file, a file that is no image tarball, an image name nobody
	// has, and a second registration of the same app, version and name.
	before := intents()
	notTar := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notTar, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{filepath.Join(dir, "typo.tar")}, "no such file"},
		{[]string{"./typo-dir/image"}, "no such file"},
		{[]string{"no-such-image-anywhere:1"}, "no such file, and the local Docker engine"},
		{[]string{notTar}, "is not an image tarball"},
		{[]string{tarPath, "--version", "1.2.0"}, `1.2.0 already has an artifact "runtime"`},
		{[]string{filepath.Join(dir, "nope.bin"), "--kind", "blob", "--name", "w2"}, "no such file"},
	} {
		args := append([]string{"artifact", "push"}, c.args...)
		if !strings.Contains(strings.Join(c.args, " "), "--version") {
			args = append(args, "--version", "9.9.9")
		}
		args = append(args, "--app", "hello")
		if _, _, err := run("", args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("push %v: %v (want %q)", c.args, err, c.want)
		}
	}
	if n := intents(); n != before {
		t.Fatalf("refused pushes minted %d publish intent(s)", n-before)
	}

	// list and show find both by digest.
	out, _ = must("artifact", "list", "--app", "hello", "--version", "1.2.0")
	var list struct{ Items []client.AppArtifact }
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Items) != 2 {
		t.Fatalf("list: %v %s", err, out)
	}
	byID := map[string]string{}
	for _, a := range list.Items {
		byID[a.ID] = a.Digest
	}
	if byID[oci.ID] != oci.Digest || byID[weights.ID] != weights.Digest {
		t.Fatalf("list does not hold the pushed digests: %s", out)
	}
	out, _ = must("artifact", "list", "--app", "other")
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Items) != 0 {
		t.Fatalf("list --app other: %v %s", err, out)
	}
	if a := artifact(must("artifact", "show", oci.ID)); a.Digest != oci.Digest || a.Repository != oci.Repository {
		t.Fatalf("show: %+v", a)
	}

	// The publishing account does not promote.
	if _, _, err := run("", "artifact", "promote", oci.ID, "--reason", "ship it"); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Fatalf("service account promoted: %v", err)
	}

	// A person verifies, promotes step by step and revokes, with reasons.
	loginAdmin()
	if _, _, err := run("", "artifact", "promote", oci.ID); err == nil || !strings.Contains(err.Error(), "--reason is required") {
		t.Fatalf("promote without --reason: %v", err)
	}
	if _, _, err := run("", "artifact", "promote", oci.ID, "--to", "active", "--reason", "too early"); err == nil || !strings.Contains(err.Error(), "HTTP 409") {
		t.Fatalf("promote draft to active: %v", err)
	}
	if a := artifact(must("artifact", "verify", oci.ID, "--reason", "ci checks")); a.TrustState != "verified" {
		t.Fatalf("verify: %+v", a)
	}
	if a := artifact(must("artifact", "verify", weights.ID, "--reason", "ci checks")); a.TrustState != "verified" {
		t.Fatalf("verify blob: %+v", a)
	}
	if a := artifact(must("artifact", "promote", oci.ID, "--reason", "next")); a.LifecycleState != "staged" {
		t.Fatalf("promote to next: %+v", a)
	}
	for _, to := range []string{"canary", "active"} {
		if a := artifact(must("artifact", "promote", oci.ID, "--to", to, "--reason", "rollout")); a.LifecycleState != to {
			t.Fatalf("promote --to %s: %+v", to, a)
		}
	}
	out, _ = must("artifact", "list", "--state", "active", "--trust-state", "verified")
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Items) != 1 || list.Items[0].ID != oci.ID {
		t.Fatalf("list active+verified: %v %s", err, out)
	}
	rev := artifact(must("artifact", "revoke", oci.ID, "--reason", "key compromised"))
	if !rev.Revoked || rev.RevokeReason != "key compromised" {
		t.Fatalf("revoke: %+v", rev)
	}
	if _, _, err := run("", "artifact", "deprecate", oci.ID, "--reason", "after revoke"); err == nil || !strings.Contains(err.Error(), "HTTP 409") {
		t.Fatalf("transition after revoke: %v", err)
	}
	// Every CLI transition is in the audit log with its reason.
	evs, _, err := s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{ResourceID: oci.ID, Outcome: "success"}, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, e := range evs {
		reasons[e.Action+": "+e.Reason]++
	}
	want := map[string]int{"artifact.register: ": 1, "artifact.verify: ci checks": 1, "artifact.promote: next": 1,
		"artifact.promote: rollout": 2, "artifact.revoke: key compromised": 1}
	for k, n := range want {
		if reasons[k] != n {
			t.Fatalf("audit rows %v, want %v", reasons, want)
		}
	}

	// A missing file fails with a message naming it, before any intent is
	// minted.
	before = intents()
	missing := filepath.Join(dir, "no-such-image.tar")
	for _, args := range [][]string{
		{"artifact", "push", missing, "--app", "hello", "--version", "1.3.0"},
		{"artifact", "push", missing, "--kind", "blob", "--name", "weights", "--app", "hello", "--version", "1.3.0"},
	} {
		_, _, err := run("", args...)
		if err == nil || !strings.Contains(err.Error(), missing) {
			t.Fatalf("gpuaas %s: want an error naming the file, got %v", strings.Join(args, " "), err)
		}
	}
	// As the binary runs it: exit status 1 and the message on stderr.
	code, stderr := executeMain(t, "gpuaas", "artifact", "push", missing, "--app", "hello", "--version", "1.3.0")
	if code != 1 || !strings.HasPrefix(stderr, "error: ") || !strings.Contains(stderr, missing) {
		t.Fatalf("exit status %d, stderr %q", code, stderr)
	}
	if n := intents(); n != before {
		t.Fatalf("a push of a missing file created %d publish intent(s)", n-before)
	}
	t.Logf("artifact push: 2 MiB image %v, %d KiB blob %v", ociTime.Round(time.Millisecond), len(blob)>>10, blobTime.Round(time.Millisecond))
}

// executeMain runs Execute, the binary's entry point, with os.Args set to
// args, and returns its exit status and what it wrote to stderr.
func executeMain(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	oldArgs, oldStderr := os.Args, os.Stderr
	os.Args, os.Stderr = args, w
	code := Execute()
	os.Args, os.Stderr = oldArgs, oldStderr
	_ = w.Close()
	out, _ := io.ReadAll(r)
	_ = r.Close()
	return code, string(out)
}
