// Package instancetest builds the tiny app images the instance end-to-end
// tests and benchmarks deploy: a static Go HTTP server compiled in the test,
// its version and behaviour fixed at build time with -ldflags, packed into
// an image FROM scratch (one layer, the binary) — no base image, no public
// registry.
package instancetest

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// Modes of the test app.
const (
	ModeServe  = "serve"  // answers /healthz and / with its version
	ModeExit   = "exit"   // prints a line and exits 3 at once (a broken release)
	ModeOpenAI = "openai" // a stand-in OpenAI-compatible server: /v1/models, /health
	// ModeSlow serves like ModeServe but its /healthz answers 503 for the
	// first SlowReadiness after start: a deploy stays in its readiness wait
	// long enough for a test to kill the server (or the agent) inside it.
	ModeSlow = "slow"
)

// SlowReadiness is how long a ModeSlow app is not ready after it starts.
const SlowReadiness = 5 * time.Second

// Port is where the test app listens inside its container.
const Port = 8080

const source = `package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

var (
	version = "dev"
	mode    = "serve"
	slow    = "0s"
)

func main() {
	fmt.Printf("testapp %s starting in mode %s\n", version, mode)
	started := time.Now()
	notReadyFor, _ := time.ParseDuration(slow)
	if mode == "exit" {
		fmt.Println("boom: this release exits before it is ready")
		os.Exit(3)
	}
	port := "8080"
	model := "stand-in/model"
	for i, a := range os.Args {
		if a == "--port" && i+1 < len(os.Args) {
			port = os.Args[i+1]
		}
		if a == "--model" && i+1 < len(os.Args) {
			model = os.Args[i+1]
		}
	}
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if mode == "slow" && time.Since(started) < notReadyFor {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	http.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	http.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []map[string]any{{"id": model, "object": "model", "owned_by": "gpuaas-test"}}})
	})
	http.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		path := os.Getenv("GPUAAS_IDENTITY_FILE")
		_, err := os.Stat(path)
		// Even root cannot open a file of a read-only bind mount for writing.
		readOnly := false
		if f, werr := os.OpenFile(path, os.O_WRONLY, 0); werr != nil {
			readOnly = err == nil
		} else {
			f.Close()
		}
		keyInEnv := false
		for _, e := range os.Environ() {
			if strings.Contains(e, "PRIVATE KEY") {
				keyInEnv = true
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"version": version, "instance": os.Getenv("GPUAAS_APP_INSTANCE_ID"),
			"identity_file": err == nil, "identity_read_only": readOnly, "key_in_env": keyInEnv})
	})
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "version=%s\n", version) })
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
}
`

// Build compiles the test app for version and mode into a static binary
// and returns its bytes.
func Build(t testing.TB, version, mode string) []byte {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module testapp\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "app")
	testbin.Static(t, dir, out, "-X main.version="+version+" -X main.mode="+mode+" -X main.slow="+SlowReadiness.String())
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// ImageLabel is the label every test image carries, with a value unique to
// the Image call: the copies an agent pulls into the local Docker engine
// carry it too, and are removed when the test ends.
const ImageLabel = "gpuaas.test.instancetest"

// Image packs a binary into an image FROM scratch that runs it as /app.
// When the test ends, every image in the local Docker engine made from it
// (pulled by an agent under any tag or digest) is removed.
func Image(t testing.TB, bin []byte) v1.Image {
	t.Helper()
	var id [8]byte
	_, _ = rand.Read(id[:])
	label := ImageLabel + "=" + hex.EncodeToString(id[:])
	t.Cleanup(func() { removeLocalImages(label) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "app", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(bin); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = []string{"/app"}
	k, v, _ := strings.Cut(label, "=")
	cfg.Config.Labels = map[string]string{k: v}
	cfg.Config.ExposedPorts = map[string]struct{}{"8080/tcp": {}}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// removeLocalImages removes the local Docker engine's images with label
// (best effort: without a docker CLI or engine there is nothing to remove).
func removeLocalImages(label string) {
	out, err := exec.Command("docker", "images", "-q", "--no-trunc", "--filter", "label="+label).Output()
	if err != nil {
		return
	}
	for _, id := range strings.Fields(string(out)) {
		_ = exec.Command("docker", "rmi", "-f", id).Run()
	}
}
