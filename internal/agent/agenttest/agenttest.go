// Package agenttest gives agent acceptance tests a real Docker engine and a
// real image in the embedded registry: a static Go HTTP server built into an
// image FROM scratch, pushed with publish-intent credentials and registered
// by digest.
package agenttest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// ImageLabel marks every image these tests build; its value is unique per
// test, so one test's cleanup never removes another's (packages run in
// parallel) and cleanup finds what an interrupted step left.
const ImageLabel = "io.gpuaas.test.agent"

// Docker runs the docker CLI (only to build and push test images; the agent
// itself speaks the Engine API) with a private config directory.
type Docker struct {
	T      testing.TB
	config string
	id     string // this test's ImageLabel value
}

// Label is this test's image label, KEY=VALUE: images built with it are
// the ones RemoveImages deletes.
func (d Docker) Label() string { return ImageLabel + "=" + d.id }

// ConfigDir is the private DOCKER_CONFIG directory (docker login writes there).
func (d Docker) ConfigDir() string { return d.config }

// Run runs one docker command; a build skips the engine's build cache
// (see NoBuildCache).
func (d Docker) Run(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if len(args) > 0 && args[0] == "build" {
		args = append([]string{"build", "--no-cache"}, args[1:]...)
	}
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+d.config, "DOCKER_BUILDKIT=0")
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Must runs one docker command and fails the test when it fails.
func (d Docker) Must(stdin string, args ...string) string {
	d.T.Helper()
	out, err := d.Run(stdin, args...)
	if err != nil {
		d.T.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// RequireDocker skips loudly without a Docker engine, and fails with CI=true.
func RequireDocker(t testing.TB) Docker {
	t.Helper()
	d := Docker{T: t, config: t.TempDir(), id: uuid.NewString()}
	why := ""
	if _, err := exec.LookPath("docker"); err != nil {
		why = "no docker CLI on PATH"
	} else if out, err := d.Run("", "version", "--format", "{{.Server.Version}}"); err != nil {
		why = "docker version failed: " + strings.TrimSpace(out)
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no Docker engine answers (%s): %s cannot run", why, t.Name())
		}
		t.Skipf("!!! SKIPPED: no Docker engine answers (%s); %s is NOT tested against Docker !!!", why, t.Name())
	}
	return d
}

// NoBuildCache returns a directory holding a docker command that runs the
// real one and adds --no-cache to docker build. Scripts that build images as
// a person would (the doc walks, the smoke scripts) put it first on their
// PATH, so their commands stay as the docs print them.
//
// Test packages run side by side on one engine, and the engine's build cache
// is not safe beside them. Docker 20.10's classic builder, probing its cache
// for a step, reads every image that could hold the step's result; for a
// first step on scratch that is every image on the engine without a parent
// (every pulled, imported or scratch-built image). When another process
// deletes one of them meanwhile (a test's cleanup, an agent's image pruner),
// the build fails with `unable to find image "sha256:…"`. With --no-cache the
// builder does not probe. Each test builds its images once, so the cache
// saves a test nothing.
func NoBuildCache(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("docker")
	if err != nil {
		t.Fatalf("no docker CLI on PATH: %v", err)
	}
	dir := t.TempDir()
	script := "#!/bin/sh\n# agenttest.NoBuildCache: builds skip the engine's build cache.\n" +
		"if [ \"$1\" = build ]; then shift; exec '" + bin + "' build --no-cache \"$@\"; fi\n" +
		"exec '" + bin + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// RemoveImages deletes every image this package built.
func (d Docker) RemoveImages() {
	out, _ := d.Run("", "images", "-q", "--no-trunc", "--filter", "label="+d.Label())
	for _, id := range strings.Fields(out) {
		d.Run("", "rmi", "-f", id)
	}
}

// serverSource is a tiny HTTP server: GET / answers "ok"; it listens on its
// first argument, else $PORT, else 8080, and exits when $EXIT_AFTER_START is set, to test container_exited.
const serverSource = `package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	fmt.Println("starting")
	if os.Getenv("EXIT_AT_ONCE") != "" {
		fmt.Println("exiting as told")
		os.Exit(3)
	}
	port := os.Getenv("PORT")
	if len(os.Args) > 1 {
		port = os.Args[1]
	}
	if port == "" {
		port = "8080"
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	http.HandleFunc("/file", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(r.URL.Query().Get("path"))
		if err != nil {
			http.Error(w, err.Error(), 404)
			return
		}
		w.Write(b)
	})
	fmt.Println("listening on", port)
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
}
`

// Image is an image in the embedded registry.
type Image struct {
	ArtifactID string
	Repository string // registry host/path
	Digest     string
}

var digestRE = regexp.MustCompile(`: digest: (sha256:[0-9a-f]{64}) size: \d+`)

// PushServerImage builds the test HTTP server into an image FROM scratch,
// pushes it into the project's repository with publish-intent credentials,
// registers and verifies it, and removes the local copies (so a pull has to
// fetch it). app names the app slug (unique per test).
func PushServerImage(t testing.TB, d Docker, s *servertest.Server, admin *servertest.Client, app string) Image {
	t.Helper()
	return PushServerImageAs(t, d, s, admin, app, "")
}

// PushServerImageAs is PushServerImage with the image's USER set (empty:
// root), for tests of what a non-root workload may read.
func PushServerImageAs(t testing.TB, d Docker, s *servertest.Server, admin *servertest.Client, app, user string) Image {
	t.Helper()
	local := "gpuaas-agent-test/" + app + ":build"
	BuildServerImage(t, d, local, user)

	base := "/api/v1/projects/" + s.Creds.ProjectID + "/app-artifacts"
	pi := admin.Do("POST", base+"/publish-intents", map[string]any{"app_slug": app, "app_version": "1.0.0", "artifact_name": "runtime"}).Want(t, 201)
	w, _ := pi.JSON["wrapped_credentials"].(map[string]any)
	tok, _ := w["wrapping_token"].(string)
	cr := admin.Do("POST", "/api/v1/apps/registry/unwrap", map[string]string{"wrapping_token": tok}).Want(t, 200)
	host, repo := cr.String("registry"), cr.String("repository")
	d.Must(cr.String("password")+"\n", "login", host, "-u", cr.String("username"), "--password-stdin")
	target := host + "/" + repo + ":1.0.0"
	d.Must("", "tag", local, target)
	m := digestRE.FindStringSubmatch(d.Must("", "push", target))
	if m == nil {
		t.Fatal("no digest in docker push output")
	}
	d.Must("", "logout", host)
	art := admin.Do("POST", base, map[string]any{"app_slug": app, "app_version": "1.0.0", "artifact_name": "runtime",
		"repository": repo, "digest": m[1], "tag": "1.0.0", "publish_intent_id": pi.String("id")}).Want(t, 201)
	admin.Do("POST", base+"/"+art.String("id")+"/verify", map[string]string{"reason": "agent test"}).Want(t, 200)
	d.Run("", "rmi", "-f", local, target)
	return Image{ArtifactID: art.String("id"), Repository: host + "/" + repo, Digest: m[1]}
}

// BuildServerImage builds the test HTTP server into the local image tag,
// FROM scratch, labelled for removal with the test's images; user sets its
// USER (empty: root).
func BuildServerImage(t testing.TB, d Docker, tag, user string) {
	t.Helper()
	userLine := ""
	if user != "" {
		userLine = "USER " + user + "\n"
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":     "module srv\n\ngo 1.21\n",
		"main.go":    serverSource,
		"Dockerfile": "FROM scratch\nLABEL " + d.Label() + "\nCOPY srv /srv\n" + userLine + "EXPOSE 8080\nENTRYPOINT [\"/srv\"]\n",
	}
	for n, body := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testbin.Static(t, dir, filepath.Join(dir, "srv"), "")
	d.Must("", "build", "-q", "-t", tag, dir)
}

// PullToken makes a (user) pull intent for an artifact and returns its
// wrapping token.
func PullToken(t testing.TB, s *servertest.Server, admin *servertest.Client, artifactID string) string {
	t.Helper()
	r := admin.Do("POST", "/api/v1/projects/"+s.Creds.ProjectID+"/app-artifacts/"+artifactID+"/pull-intents", map[string]any{}).Want(t, 201)
	w, _ := r.JSON["wrapped_credentials"].(map[string]any)
	tok, _ := w["wrapping_token"].(string)
	return tok
}
