package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// noLogins is an Authorizer that admits nobody: the test signs its own
// registry token.
type noLogins struct{}

func (noLogins) Authenticate(context.Context, string, string) (registry.Subject, error) {
	return registry.Subject{}, registry.ErrInvalidCredentials
}

func (noLogins) Allowed(context.Context, registry.Subject, string, []string) ([]string, error) {
	return nil, nil
}

// gpuaas registry gc: refused beside a running server and for an
// external registry (exit 1, saying why); on a stopped registry's
// directory, --dry-run reports the deleted image's blobs and removes
// nothing, and the real run removes them, with the same report.
func TestRegistryGCCLI(t *testing.T) {
	ctx := context.Background()
	run := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := Run(ctx, args, strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	t.Setenv("GPUAAS_REGISTRY_URL", "")

	// The server holds its registry directory (<data-dir>/registry).
	s := servertest.Start(t, store.SQLite)
	code, _, errOut := run("registry", "gc", "--data-dir", s.App.Config.DataDir)
	if want := "error: a gpuaas server is using " + filepath.Join(s.App.Config.DataDir, "registry") + "; stop every replica, then run it again\n"; code != 1 || errOut != want {
		t.Fatalf("gc beside a server: exit %d, stderr %q; want 1, %q", code, errOut, want)
	}

	// An embedded registry with one image pushed and then deleted.
	dir := t.TempDir()
	srv := httptest.NewUnstartedServer(nil)
	host := srv.Listener.Addr().String()
	reg, err := registry.New(ctx, registry.Config{RootDir: dir, Host: host, Realm: "http://" + host + registry.TokenPath}, noLogins{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v2/", reg.Handler())
	srv.Config.Handler = mux
	srv.Start()
	const repo = "gpuaas/apps/p1/app"
	tok, err := reg.TokenHandler().Issue(registry.Subject{ID: "operator"},
		[]registry.Scope{{Type: "repository", Name: repo, Actions: []string{registry.ActionPull, registry.ActionPush, registry.ActionDelete}}})
	if err != nil {
		t.Fatal(err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(authn.FromConfig(authn.AuthConfig{RegistryToken: tok.Token}))}
	img, err := random.Image(4096, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host+"/"+repo+":v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, opts...); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	if err := remote.Delete(ref.Context().Digest(d.String()), opts...); err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	layerFile := filepath.Join(dir, "docker/registry/v2/blobs/sha256", ld.Hex[:2], ld.Hex, "data")
	raw, _ := img.RawManifest()
	config, _ := img.RawConfigFile()
	layerSize, _ := layers[0].Size()
	wantBytes := int64(len(raw)+len(config)) + layerSize

	code, _, errOut = run("registry", "gc", "--registry-dir", dir)
	if code != 1 || !strings.Contains(errOut, "a gpuaas server is using "+dir) {
		t.Fatalf("gc beside an open registry: exit %d, %q", code, errOut)
	}
	srv.Close()
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}

	gc := func(args ...string) registryGC {
		t.Helper()
		code, out, errOut := run(append([]string{"registry", "gc", "--registry-dir", dir, "-o", "json"}, args...)...)
		var got registryGC
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("gpuaas registry gc %v: exit %d, %q, %q", args, code, out, errOut)
		}
		return got
	}
	want := registryGC{RegistryDir: dir, GCResult: registry.GCResult{DryRun: true, Blobs: 3, Bytes: wantBytes, LayerLinks: 2}}
	if got := gc("--dry-run"); got != want {
		t.Fatalf("dry run: %+v, want %+v", got, want)
	}
	if _, err := os.Stat(layerFile); err != nil {
		t.Fatalf("the dry run removed the layer: %v", err)
	}
	want.DryRun = false
	if got := gc(); got != want {
		t.Fatalf("gc: %+v, want %+v", got, want)
	}
	if _, err := os.Stat(layerFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the deleted image's layer after gc: %v, want it removed", err)
	}

	t.Setenv("GPUAAS_REGISTRY_URL", "https://registry.example.com")
	code, _, errOut = run("registry", "gc", "--registry-dir", dir)
	if code != 1 || !strings.Contains(errOut, "the server uses the external registry https://registry.example.com") {
		t.Fatalf("gc with an external registry: exit %d, %q", code, errOut)
	}
}
