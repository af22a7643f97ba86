package httpapi_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/agent/agenttest"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// authRefused matches the engine's report of a registry refusing access.
var authRefused = regexp.MustCompile(`(?i)denied|unauthorized|insufficient_scope|authentication required`)

// The acceptance path with the real Docker engine: an image built by
// `docker build` is pushed with `docker push` and the publish intent's
// unwrapped credentials into the embedded registry on the server's own
// listener (token realm on the same listener), registered by digest, and
// pulled back by digest with pull-intent credentials. The publish
// credentials cannot push into another project's repository.
func TestDockerPushIntoEmbeddedRegistry(t *testing.T) {
	t.Parallel()
	d := agenttest.RequireDocker(t)
	t.Cleanup(d.RemoveImages)
	start := time.Now()

	// A tiny static binary and a FROM scratch image around it (no base image
	// exists on the engine).
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":     "module hello\n\ngo 1.21\n",
		"main.go":    "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"hello from gpuaas\\n\") }\n",
		"Dockerfile": "FROM scratch\nLABEL " + d.Label() + "\nCOPY hello /hello\nENTRYPOINT [\"/hello\"]\n",
	}
	for n, body := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testbin.Static(t, dir, filepath.Join(dir, "hello"), "")
	local := "gpuaas-test/docker-push:build"
	d.Must("", "build", "-q", "-t", local, dir)
	built := time.Now()

	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	pid := s.Creds.ProjectID
	base := "/api/v1/projects/" + pid + "/app-artifacts"
	host := admin.Do("GET", "/api/v1/apps/registry", nil).Want(t, 200).String("registry_host")
	if !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("registry host %q is not on loopback: the engine would want TLS", host)
	}

	other := admin.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/projects", map[string]string{"slug": "other", "name": "Other"}).Want(t, 201).String("id")
	otherRepo := admin.Do("POST", "/api/v1/projects/"+other+"/app-artifacts/publish-intents",
		map[string]any{"app_slug": "hello", "app_version": "1.0.0", "artifact_name": "runtime"}).Want(t, 201).String("repository")

	pi := admin.Do("POST", base+"/publish-intents", map[string]any{"app_slug": "hello", "app_version": "1.0.0", "artifact_name": "runtime"}).Want(t, 201)
	creds := unwrap(t, admin, wrapToken(pi))
	if creds.registry != host || creds.repo != pi.String("repository") {
		t.Fatalf("unwrapped %+v for intent %s", creds, pi.Body)
	}

	// docker login: the engine fetches a token from the realm with the
	// Basic credentials; a wrong password is refused.
	if out, err := d.Run("wrong\n", "login", host, "-u", creds.user, "--password-stdin"); err == nil {
		t.Fatalf("docker login with a wrong password succeeded: %s", out)
	}
	if out := d.Must(creds.pass+"\n", "login", host, "-u", creds.user, "--password-stdin"); !strings.Contains(out, "Login Succeeded") {
		t.Fatalf("docker login: %s", out)
	}
	if cfg, err := os.ReadFile(filepath.Join(d.ConfigDir(), "config.json")); err != nil || !strings.Contains(string(cfg), host) {
		t.Fatalf("docker login did not use the temporary DOCKER_CONFIG: %v %s", err, cfg)
	}

	target := host + "/" + creds.repo + ":1.0.0"
	d.Must("", "tag", local, target)
	out := d.Must("", "push", target)
	m := regexp.MustCompile(`1\.0\.0: digest: (sha256:[0-9a-f]{64}) size: \d+`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no digest in docker push output:\n%s", out)
	}
	digest := m[1]
	pushed := time.Now()

	// The publish credentials reach no other project's repository.
	stray := host + "/" + otherRepo + ":stolen"
	d.Must("", "tag", local, stray)
	if out, err := d.Run("", "push", stray); err == nil {
		t.Fatalf("publish credentials pushed into another project's repository:\n%s", out)
	} else if !authRefused.MatchString(out) {
		t.Fatalf("push into another repository failed without an authorization error:\n%s", out)
	}

	// Registration by digest checks the manifest Docker pushed.
	art := admin.Do("POST", base, map[string]any{"app_slug": "hello", "app_version": "1.0.0", "artifact_name": "runtime",
		"repository": creds.repo, "digest": digest, "tag": "1.0.0", "publish_intent_id": pi.String("id")}).Want(t, 201)
	if art.String("digest") != digest || art.String("media_type") != "application/vnd.docker.distribution.manifest.v2+json" {
		t.Fatalf("registered: %s", art.Body)
	}
	id := art.String("id")
	if v := admin.Do("POST", base+"/"+id+"/verify", map[string]string{"reason": "docker push"}).Want(t, 200); v.String("trust_state") != "verified" {
		t.Fatalf("verify (no signature required): %s", v.Body)
	}

	// Pull back by digest with pull-intent credentials, from an engine that
	// no longer holds the image.
	pull := admin.Do("POST", base+"/"+id+"/pull-intents", map[string]any{}).Want(t, 201)
	pc := unwrap(t, admin, wrapToken(pull))
	d.RemoveImages()
	if out, err := d.Run("", "image", "inspect", local); err == nil {
		t.Fatalf("image still present after docker rmi -f:\n%s", out)
	}
	d.Must("", "logout", host)
	byDigest := host + "/" + creds.repo + "@" + digest
	if out, err := d.Run("", "pull", byDigest); err == nil || !authRefused.MatchString(out) {
		t.Fatalf("anonymous docker pull was not refused for authorization (%v):\n%s", err, out)
	}
	d.Must(pc.pass+"\n", "login", host, "-u", pc.user, "--password-stdin")
	if out := d.Must("", "pull", byDigest); !strings.Contains(out, digest) {
		t.Fatalf("docker pull by digest:\n%s", out)
	}
	if got := strings.TrimSpace(d.Must("", "image", "inspect", "--format", "{{index .Config.Labels \""+agenttest.ImageLabel+"\"}}", byDigest)); agenttest.ImageLabel+"="+got != d.Label() {
		t.Fatalf("pulled image label %q", got)
	}
	if out := d.Must("", "run", "--rm", "--network", "none", byDigest); strings.TrimSpace(out) != "hello from gpuaas" {
		t.Fatalf("pulled image ran: %q", out)
	}
	// Pull credentials do not push.
	retag := host + "/" + creds.repo + ":pull-only"
	d.Must("", "tag", byDigest, retag)
	if out, err := d.Run("", "push", retag); err == nil || !authRefused.MatchString(out) {
		t.Fatalf("pull-intent credentials were not refused a push (%v):\n%s", err, out)
	}
	t.Logf("go build + docker build %v, server to docker push %v, register to pull+run %v",
		built.Sub(start).Round(time.Millisecond), pushed.Sub(built).Round(time.Millisecond), time.Since(pushed).Round(time.Millisecond))
}
