package scaffold_test

import (
	"bufio"
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
	logs := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs <- sc.Text()
		}
		close(logs)
	}()
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
	var total int64
	for _, q := range api.accepted {
		total += q
	}
	if total != 4 || api.tokens < 1 {
		t.Errorf("accepted %v (total %d, want 4) with %d tokens", api.accepted, total, api.tokens)
	}
}

type fakeAPI struct {
	t           *testing.T
	pub         ed25519.PublicKey
	audience    string
	refuseFirst bool

	mu       sync.Mutex
	tokens   int
	attempts []string
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
		if err := json.NewDecoder(r.Body).Decode(&evs); err != nil || len(evs) != 1 || evs[0].Data.UsageUnit != "requests" || evs[0].Type != "gpuaas.usage.v1" {
			f.t.Errorf("usage body: %v %+v", err, evs)
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		f.attempts = append(f.attempts, evs[0].ID)
		if f.refuseFirst {
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
