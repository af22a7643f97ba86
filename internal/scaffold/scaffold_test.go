package scaffold_test

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/scaffold"
)

func TestEveryTemplateWritesAValidApp(t *testing.T) {
	for _, tmpl := range scaffold.Templates() {
		t.Run(tmpl, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "my-svc")
			files, err := scaffold.Write(dir, scaffold.Options{Template: tmpl, DisplayName: "My svc: the first"})
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{scaffold.ManifestFile, "README.md", ".github/workflows/release.yml", ".gitignore", "Dockerfile"} {
				if !slices.Contains(files, want) {
					t.Errorf("no %s among %v", want, files)
				}
			}
			r, err := manifest.ValidateFile(filepath.Join(dir, scaffold.ManifestFile))
			if err != nil || !r.Valid || r.App != "my-svc" {
				t.Fatalf("the written manifest: %v %+v", err, r)
			}
			// Nothing left unrendered; every YAML file (the CI workflow,
			// smoke.yaml) parses.
			for _, f := range files {
				b, _ := os.ReadFile(filepath.Join(dir, f))
				if strings.Contains(string(b), "[[") {
					t.Errorf("%s has an unrendered [[ ]]", f)
				}
				if strings.HasPrefix(filepath.Base(f), "_") {
					t.Errorf("%s is about the template, not part of the app", f)
				}
				if strings.HasSuffix(f, ".yml") || strings.HasSuffix(f, ".yaml") {
					var v map[string]any
					if err := yaml.Unmarshal(b, &v); err != nil || len(v) == 0 {
						t.Errorf("%s: not a YAML mapping: %v", f, err)
					}
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				for _, args := range [][]string{{"gofmt", "-l", "."}, {"go", "vet", "./..."}} {
					out, err := runIn(dir, args...)
					if err != nil || strings.TrimSpace(out) != "" {
						t.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out)
					}
				}
			}
		})
	}
}

// An app that calls the platform (usage.go: token, usage, heartbeats) over
// the HTTPS API of a real install must find root certificates in its image;
// an image FROM scratch has none unless the Dockerfile copies them in, and
// every call then fails with "certificate signed by unknown authority".
// Both release images count: the two-stage Dockerfile copies the golang
// image's roots, Dockerfile.prebuilt the host's, put beside the binary.
func TestReleaseImagesFromScratchCarryRootCertificates(t *testing.T) {
	for _, tmpl := range scaffold.Templates() {
		dir := filepath.Join(t.TempDir(), tmpl)
		files, err := scaffold.Write(dir, scaffold.Options{Template: tmpl, Slug: "my-svc"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(files, "usage.go") {
			continue // never calls the platform
		}
		for _, name := range []string{"Dockerfile", "Dockerfile.prebuilt"} {
			if !slices.Contains(files, name) {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			var final []string // the last stage's lines
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "FROM ") {
					final = nil
				}
				final = append(final, l)
			}
			if len(final) == 0 || strings.TrimSpace(final[0]) != "FROM scratch" {
				continue // a base image with its own roots
			}
			ok := false
			for _, l := range final {
				f := strings.Fields(l)
				if len(f) == 4 && strings.HasPrefix(f[1], "--from=") {
					f = slices.Delete(f, 1, 2) // from a build stage
				}
				ok = ok || len(f) == 3 && f[0] == "COPY" &&
					path.Base(f[1]) == "ca-certificates.crt" && f[2] == "/etc/ssl/certs/ca-certificates.crt"
			}
			if !ok {
				t.Errorf("%s/%s: the image is FROM scratch and calls the API, but has no /etc/ssl/certs/ca-certificates.crt:\n%s", tmpl, name, b)
			}
		}
	}
}

func TestWriteRefuses(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "keep.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := scaffold.Write(full, scaffold.Options{Slug: "ok-app"}); !errors.Is(err, scaffold.ErrNotEmpty) {
		t.Fatalf("non-empty dir: %v", err)
	}
	if _, err := scaffold.Write(full, scaffold.Options{Slug: "ok-app", Force: true}); err != nil {
		t.Fatalf("--force: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(full, "keep.txt")); string(b) != "mine" {
		t.Fatal("--force touched a file the template does not have")
	}
	for _, c := range []struct {
		o    scaffold.Options
		want string
	}{
		{scaffold.Options{Slug: "Bad_Slug"}, "/app/slug: slug must start with a lowercase letter"},
		{scaffold.Options{Slug: "x"}, "2 to 63 characters"},
		{scaffold.Options{Slug: "fine", Template: "nope"}, `no template "nope"; there are: controller, http, jupyter, vllm-compose`},
		{scaffold.Options{Slug: "fine", Template: "_shared"}, `no template "_shared"`},
	} {
		dir := filepath.Join(t.TempDir(), "new")
		_, err := scaffold.Write(dir, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.o, err, c.want)
		}
		if _, statErr := os.Stat(dir); statErr == nil {
			t.Errorf("%+v: refused, but wrote %s", c.o, dir)
		}
	}
}

// The http template's app, built and run as the platform would run it,
// against a stand-in API that checks what a real one checks of it: the
// assertion signed by the mounted key for the right audience, the token on
// the usage call, CloudEvents with the instance's unit. The first report is
// refused with 503: the retry must carry the same event id. Then SIGTERM,
// the usage still owed is reported, and the app exits 0.
func TestHTTPTemplateAppReportsUsageAndStopsCleanly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hello")
	if _, err := scaffold.Write(dir, scaffold.Options{Template: "http"}); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "app")
	if out, err := runIn(dir, "go", "build", "-o", bin, "."); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(priv)
	const tokenURL = "https://api.example/api/v1/auth/service-account/token" // the audience; not reachable
	api := &fakeAPI{t: t, pub: pub, audience: tokenURL, refuseFirst: true}
	srv := httptest.NewServer(api)
	defer srv.Close()
	key, _ := json.Marshal(map[string]string{"type": "service_account", "service_account_id": "sa-1", "key_id": "k-1",
		"private_key_pem": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "token_url": tokenURL})
	keyFile := filepath.Join(t.TempDir(), "identity.json")
	if err := os.WriteFile(keyFile, key, 0o400); err != nil {
		t.Fatal(err)
	}

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PORT="+port, "USAGE_INTERVAL=200ms", "GPUAAS_IDENTITY_FILE="+keyFile,
		"GPUAAS_APP_INSTANCE_ID=inst-1", "GPUAAS_PROJECT_ID=proj-1", "GPUAAS_API_BASE_URL="+srv.URL,
		`GPUAAS_PARAMETERS={"greeting":"ahoy"}`, "GPUAAS_APP_VERSION=1.2.3")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := logLines(stderr, 100)
	waitLog(t, logs, `"msg":"serving"`)
	base := "http://127.0.0.1:" + port
	if code, body := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	for range 3 {
		if _, body := get(t, base+"/"); body != "ahoy from hello 1.2.3\n" {
			t.Fatalf("/ = %q", body)
		}
	}
	waitLog(t, logs, `"msg":"usage reported"`)
	get(t, base+"/") // one more, owed at the stop
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM) // a second signal changes nothing
	waitLog(t, logs, `"msg":"stopped cleanly"`)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}

	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.attempts) < 3 {
		t.Fatalf("usage posts: %v", api.attempts)
	}
	if api.attempts[0] != api.attempts[1] {
		t.Errorf("the retry of a refused report changed its id: %v", api.attempts)
	}
	if total := api.total(); total != 4 || api.tokens < 1 {
		t.Errorf("accepted %v (total %d, want 4) with %d tokens", api.accepted, total, api.tokens)
	}
}

// A report that failed is kept and sent again at the stop; what was
// counted after it was cut must go out too. Before, the last flush sent
// the kept report only, and the requests served since went unbilled.
func TestHTTPTemplateAppReportsAllItOwesAfterAFailedReport(t *testing.T) {
	api := &fakeAPI{t: t, refuse: true}
	app := startHTTPTemplateApp(t, api)
	for range 3 {
		get(t, app.base+"/")
	}
	// The report of those three is cut and refused; its retry waits.
	waitFor(t, func() bool { api.mu.Lock(); defer api.mu.Unlock(); return len(api.attempts) > 0 })
	get(t, app.base+"/") // counted after the cut
	if err := app.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	api.mu.Lock()
	api.refuse = false // the platform is back for the stop
	api.mu.Unlock()
	app.waitStopped(t)
	api.mu.Lock()
	defer api.mu.Unlock()
	if total := api.total(); total != 4 {
		t.Errorf("accepted %v (total %d, want 4); posts %v", api.accepted, total, api.attempts)
	}
}

// A report refused with 429 and Retry-After goes again, with the same id,
// no sooner than the platform asked, and the heartbeats go on meanwhile.
// Before, the retry came after the app's own back-off (500 ms), and the
// heartbeats waited behind the report.
func TestHTTPTemplateAppWaitsTheRetryAfterItIsTold(t *testing.T) {
	var beats []time.Time
	api := &fakeAPI{t: t, limitFirst: "3", other: func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/projects/proj-1/app-instances/inst-1/runtime-events" {
			http.NotFound(w, r)
			return
		}
		beats = append(beats, time.Now())
		fmt.Fprint(w, `{"recorded":1}`)
	}}
	app := startHTTPTemplateApp(t, api)
	for range 3 {
		get(t, app.base+"/")
	}
	waitFor(t, func() bool { api.mu.Lock(); defer api.mu.Unlock(); return api.total() == 3 })
	if err := app.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	app.waitStopped(t)
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.attempts) < 2 || api.attempts[0] != api.attempts[1] {
		t.Fatalf("usage posts %v: want the refused report once more, with its id", api.attempts)
	}
	// Both times are the stand-in's: the wait began after the first was
	// taken, so it cannot be shorter. The upper bound only catches a wait
	// that never ends; the app's own back-off is well under it.
	if waited := api.received[1].Sub(api.received[0]); waited < 3*time.Second || waited > 20*time.Second {
		t.Errorf("the retry came %v after a 429 with Retry-After: 3", waited)
	}
	during := 0
	for _, b := range beats {
		if b.After(api.received[0]) && b.Before(api.received[1]) {
			during++
		}
	}
	if during < 3 { // every 200 ms: about 15
		t.Errorf("%d heartbeats while the report waited 3 s", during)
	}
}

// A Retry-After that runs past the stop's deadline (a minute against the
// http app's 20 s) does not cost the report: the stop sends it at once, and
// the app exits well inside its budget. Before, the stop slept out its
// whole budget waiting for the minute to pass and sent nothing.
func TestHTTPTemplateAppReportsAtTheStopThoughTheRetryAfterRunsPastIt(t *testing.T) {
	api := &fakeAPI{t: t, limitFirst: "60"}
	app := startHTTPTemplateApp(t, api)
	for range 3 {
		get(t, app.base+"/")
	}
	waitFor(t, func() bool { api.mu.Lock(); defer api.mu.Unlock(); return len(api.attempts) > 0 })
	stop := time.Now()
	if err := app.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	app.waitStopped(t)
	took := time.Since(stop)
	api.mu.Lock()
	defer api.mu.Unlock()
	if total := api.total(); total != 3 {
		t.Errorf("accepted %v (total %d, want 3); posts %v", api.accepted, total, api.attempts)
	}
	if took > 10*time.Second {
		t.Errorf("the stop took %v", took)
	}
}

// When the last of a report's tries fails, the flush returns at once: the
// stop ends with it. Before, it backed off once more after the last try
// (8 s here), holding the report and the stop for nothing.
func TestHTTPTemplateAppDoesNotWaitAfterTheLastTry(t *testing.T) {
	api := &fakeAPI{t: t, refuse: true}
	app := startHTTPTemplateApp(t, api)
	get(t, app.base+"/")
	waitFor(t, func() bool { api.mu.Lock(); defer api.mu.Unlock(); return len(api.attempts) > 0 })
	if err := app.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitLog(t, app.logs, `"msg":"usage not reported before exit"`)
	logged := time.Now()
	app.waitStopped(t)
	api.mu.Lock()
	defer api.mu.Unlock()
	if after := logged.Sub(api.received[len(api.received)-1]); after > 3*time.Second {
		t.Errorf("the stop gave up %v after its last try", after)
	}
}

// The vllm-compose app counts a streamed answer's tokens from its last
// chunk (the usage chunk), however long the stream: before, it kept only
// the first 4 MiB of a stream, so a long answer's usage chunk was never
// seen and the answer was billed as 0 tokens.
func TestVLLMTemplateAppMetersALongStream(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "llm")
	if _, err := scaffold.Write(dir, scaffold.Options{Template: "vllm-compose"}); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]string{{"-o", "app", "."}, {"-o", "app-standin", "./standin"}} {
		if out, err := runIn(dir, append([]string{"go", "build"}, b...)...); err != nil {
			t.Fatalf("go build %v: %v\n%s", b, err, out)
		}
	}
	api := &fakeAPI{t: t, unit: "tokens"}
	app := startTemplateApp(t, api, filepath.Join(dir, "app"), []string{"--model", "org/m", "--port", "PORT"},
		"VLLM_COMMAND="+filepath.Join(dir, "app-standin"), "BACKEND_PORT="+freePort(t))
	waitFor(t, func() bool { code, _ := get(t, app.base+"/v1/models"); return code == 200 })

	// 60,000 words come back as 60,001 chunks, about 7 MiB of stream.
	prompt := strings.Repeat("w ", 60000)
	body, _ := json.Marshal(map[string]any{"model": "org/m", "prompt": prompt, "stream": true})
	resp, err := http.Post(app.base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || n < 5<<20 {
		t.Fatalf("stream: %s, %d bytes", resp.Status, n)
	}
	if err := app.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	app.waitStopped(t)
	api.mu.Lock()
	defer api.mu.Unlock()
	if want, total := int64(60000+60001), api.total(); total != want {
		t.Errorf("metered %d tokens (%v), want %d", total, api.accepted, want)
	}
}

// The controller reports a worker's change as a runtime event; when the
// platform cannot take it (the tries run out), a later poll reports it
// again with the same id. Before, the change entered the roster before it
// was reported, and an event that failed was never sent. After its last
// try the report does not wait (it waited 3 s before giving the batch to
// the next poll, holding up the roster): the next poll (every second)
// sends it again.
func TestControllerTemplateReportsAMemberChangeAfterAFailedReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	if _, err := scaffold.Write(dir, scaffold.Options{Template: "controller"}); err != nil {
		t.Fatal(err)
	}
	if out, err := runIn(dir, "go", "build", "-o", "app", "."); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const inst = "/api/v1/projects/proj-1/app-instances/inst-1"
	refused, taken := 0, map[string]int{} // member events: posts refused, and taken by id
	var lastRefused, firstTaken time.Time
	api := &fakeAPI{t: t, other: func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case inst + "/members":
			fmt.Fprint(w, `{"items":[{"id":"c","name":"controller","added":false,"status":"running"},`+
				`{"id":"m-1","name":"worker-1","added":true,"node_id":"n-1","role":"worker","status":"running","updated_at":"2026-01-01T00:00:00Z"}]}`)
		case inst + "/runtime-events":
			var evs []struct{ ID, Type string }
			if err := json.NewDecoder(r.Body).Decode(&evs); err != nil || len(evs) == 0 {
				http.Error(w, "bad", http.StatusBadRequest)
				return
			}
			if evs[0].Type != "member_added" {
				fmt.Fprint(w, `{"recorded":1}`) // the heartbeat
				return
			}
			if refused < 3 { // every try of the first report
				refused++
				lastRefused = time.Now()
				http.Error(w, `{"error":{"code":"unavailable"}}`, http.StatusServiceUnavailable)
				return
			}
			if len(taken) == 0 {
				firstTaken = time.Now()
			}
			taken[evs[0].ID]++
			fmt.Fprint(w, `{"recorded":1}`)
		default:
			http.NotFound(w, r)
		}
	}}
	app := startTemplateApp(t, api, filepath.Join(dir, "app"), nil, "USAGE_INTERVAL=1h")
	waitFor(t, func() bool { api.mu.Lock(); defer api.mu.Unlock(); return len(taken) > 0 })
	if err := app.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitLog(t, app.logs, `"msg":"stopped cleanly"`)
	_ = app.cmd.Wait()
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(taken) != 1 || taken["roster-m-1-running-2026-01-01T00:00:00Z"] != 1 {
		t.Errorf("member events taken: %v", taken)
	}
	if gap := firstTaken.Sub(lastRefused); gap > 2500*time.Millisecond {
		t.Errorf("the report was sent again %v after its last refused try; the next poll (1 s) should have sent it", gap)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

type templateApp struct {
	cmd  *exec.Cmd
	base string
	logs chan string
}

// waitStopped waits for the app, signalled to stop, to log its clean stop
// and exit 0.
func (a templateApp) waitStopped(t *testing.T) {
	t.Helper()
	waitLog(t, a.logs, `"msg":"stopped cleanly"`)
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

// startHTTPTemplateApp builds the http template's app and runs it against
// api, as the platform would, until it serves.
func startHTTPTemplateApp(t *testing.T, api *fakeAPI) templateApp {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "hello")
	if _, err := scaffold.Write(dir, scaffold.Options{Template: "http"}); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "app")
	if out, err := runIn(dir, "go", "build", "-o", bin, "."); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return startTemplateApp(t, api, bin, nil)
}

// startTemplateApp runs bin with args (PORT in them is the port it is
// given) against api, with a mounted identity, until it logs that it serves.
func startTemplateApp(t *testing.T, api *fakeAPI, bin string, args []string, env ...string) templateApp {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(priv)
	const tokenURL = "https://api.example/api/v1/auth/service-account/token"
	api.pub, api.audience = pub, tokenURL
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	key, _ := json.Marshal(map[string]string{"type": "service_account", "service_account_id": "sa-1", "key_id": "k-1",
		"private_key_pem": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "token_url": tokenURL})
	keyFile := filepath.Join(t.TempDir(), "identity.json")
	if err := os.WriteFile(keyFile, key, 0o400); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	for i, a := range args {
		if a == "PORT" {
			args[i] = port
		}
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its children go with it
	cmd.Env = append(append(os.Environ(), "PORT="+port, "USAGE_INTERVAL=200ms", "GPUAAS_IDENTITY_FILE="+keyFile,
		"GPUAAS_APP_INSTANCE_ID=inst-1", "GPUAAS_PROJECT_ID=proj-1", "GPUAAS_API_BASE_URL="+srv.URL), env...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	logs := logLines(stderr, 1000)
	waitLog(t, logs, `"msg":"serving"`)
	return templateApp{cmd: cmd, base: "http://127.0.0.1:" + port, logs: logs}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not within 30 s")
		}
	}
}

// total is the quantity of every usage event taken; the caller holds mu.
func (f *fakeAPI) total() int64 {
	var n int64
	for _, q := range f.accepted {
		n += q
	}
	return n
}

type fakeAPI struct {
	t           *testing.T
	pub         ed25519.PublicKey
	audience    string
	refuseFirst bool
	limitFirst  string           // the first usage post answers 429 with this Retry-After
	unit        string           // the usage unit the app reports; requests when empty
	other       http.HandlerFunc // any other path (called with mu held)

	mu       sync.Mutex
	refuse   bool // every usage post answers 503 while set
	tokens   int
	attempts []string
	received []time.Time // when each of attempts came
	accepted map[string]int64
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.URL.Path {
	case "/api/v1/auth/service-account/token":
		var in struct{ GrantType, Assertion string }
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &struct {
			GrantType *string `json:"grant_type"`
			Assertion *string `json:"assertion"`
		}{&in.GrantType, &in.Assertion})
		if err := f.checkAssertion(in.GrantType, in.Assertion); err != nil {
			f.t.Errorf("assertion: %v", err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		f.tokens++
		fmt.Fprint(w, `{"access_token":"tok-1","token_type":"Bearer","expires_in":900}`)
	case "/api/v1/projects/proj-1/app-instances/inst-1/usage":
		if r.Header.Get("Authorization") != "Bearer tok-1" || r.Header.Get("Content-Type") != "application/cloudevents-batch+json" {
			f.t.Errorf("usage call: auth %q type %q", r.Header.Get("Authorization"), r.Header.Get("Content-Type"))
		}
		var evs []struct {
			ID, Source, Type, SpecVersion string
			Data                          struct {
				UsageUnit string `json:"usage_unit"`
				Quantity  int64  `json:"quantity"`
			} `json:"data"`
		}
		if err := json.NewDecoder(r.Body).Decode(&evs); err != nil || len(evs) != 1 || evs[0].Data.UsageUnit != cmp.Or(f.unit, "requests") || evs[0].Type != "gpuaas.usage.v1" {
			f.t.Errorf("usage body: %v %+v", err, evs)
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		f.attempts = append(f.attempts, evs[0].ID)
		f.received = append(f.received, time.Now())
		if f.limitFirst != "" {
			w.Header().Set("Retry-After", f.limitFirst)
			f.limitFirst = ""
			http.Error(w, `{"error":{"code":"usage_rate_limited"}}`, http.StatusTooManyRequests)
			return
		}
		if f.refuseFirst || f.refuse {
			f.refuseFirst = false
			http.Error(w, `{"error":{"code":"unavailable"}}`, http.StatusServiceUnavailable)
			return
		}
		if f.accepted == nil {
			f.accepted = map[string]int64{}
		}
		f.accepted[evs[0].ID] = evs[0].Data.Quantity // a repeat would overwrite, not add
		fmt.Fprint(w, `{"results":[{"status":"recorded"}]}`)
	default:
		if f.other != nil {
			f.other(w, r)
			return
		}
		http.NotFound(w, r)
	}
}

func (f *fakeAPI) checkAssertion(grant, jwt string) error {
	if grant != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		return fmt.Errorf("grant_type %q", grant)
	}
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return fmt.Errorf("not a JWS: %q", jwt)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !ed25519.Verify(f.pub, []byte(parts[0]+"."+parts[1]), sig) {
		return errors.New("signature does not verify with the mounted key")
	}
	var h struct{ Alg, Kid string }
	var c struct {
		Iss, Sub string
		Aud      []string
		Exp, Iat int64
	}
	hb, _ := base64.RawURLEncoding.DecodeString(parts[0])
	cb, _ := base64.RawURLEncoding.DecodeString(parts[1])
	if json.Unmarshal(hb, &h) != nil || json.Unmarshal(cb, &c) != nil {
		return errors.New("unreadable header or claims")
	}
	if h.Alg != "EdDSA" || h.Kid != "k-1" || c.Iss != "sa-1" || c.Sub != "sa-1" || len(c.Aud) != 1 || c.Aud[0] != f.audience {
		return fmt.Errorf("header %+v claims %+v", h, c)
	}
	if life := c.Exp - c.Iat; life <= 0 || life > 600 {
		return fmt.Errorf("assertion lives %d s", life)
	}
	return nil
}

func waitLog(t *testing.T, logs <-chan string, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-logs:
			if !ok {
				t.Fatalf("the app exited before logging %s", want)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no log line with %s in 30 s", want)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func runIn(dir string, args ...string) (string, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// logLines hands on the lines r yields, buffering up to n, and closes the
// channel at r's end.
func logLines(r io.Reader, n int) chan string {
	logs := make(chan string, n)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			logs <- sc.Text()
		}
		close(logs)
	}()
	return logs
}
