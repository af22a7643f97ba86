package registry

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// blobFiles are the data files of img's blobs (manifest, config, layers)
// in the registry storage under root, and their total size.
func blobFiles(t *testing.T, root string, img v1.Image) ([]string, int64) {
	t.Helper()
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	descs := append([]v1.Descriptor{{Digest: d, Size: int64(len(raw))}, m.Config}, m.Layers...)
	var files []string
	var size int64
	for _, desc := range descs {
		files = append(files, filepath.Join(root, "docker/registry/v2/blobs", desc.Digest.Algorithm, desc.Digest.Hex[:2], desc.Digest.Hex, "data"))
		size += desc.Size
	}
	return files, size
}

func wantFiles(t *testing.T, present bool, files ...string) {
	t.Helper()
	for _, f := range files {
		_, err := os.Stat(f)
		if present && err != nil {
			t.Errorf("%s: %v, want it on disk", f, err)
		}
		if !present && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it removed", f, err)
		}
	}
}

// Garbage collection removes exactly what a manifest delete left behind:
// an untagged image and a signature tag stay whole, the deleted image's
// blobs go; a dry run reports the same and removes nothing; gc refuses
// while a registry has the storage open, and a registry refuses to open
// while gc holds it.
func TestCollectGarbage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newTestEnv(t, nil)
	root := env.reg.cfg.RootDir
	env.authz.add("publisher", "s3cret", appRepo, ActionPush, ActionPull, ActionDelete)
	auth := &authn.Basic{Username: "publisher", Password: "s3cret"}
	opts := env.opts(ctx, auth)

	// kept is pushed by digest only: the platform keeps untagged
	// manifests. Its signature is a tag of a manifest of its own.
	kept, gone, sig := ociImage(t, 64<<10), ociImage(t, 96<<10), ociImage(t, 512)
	keptDigest, _ := kept.Digest()
	goneDigest, _ := gone.Digest()
	sigDigest, _ := sig.Digest()
	repo := env.ref(t, appRepo).Context()
	sigTag := repo.Tag("sha256-" + keptDigest.Hex + ".sig")
	for ref, img := range map[name.Reference]v1.Image{repo.Digest(keptDigest.String()): kept, repo.Tag("v2"): gone, sigTag: sig} {
		if err := remote.Write(ref, img, opts...); err != nil {
			t.Fatalf("push %s: %v", ref, err)
		}
	}
	if err := remote.Delete(repo.Digest(goneDigest.String()), opts...); err != nil {
		t.Fatalf("delete %s: %v", goneDigest, err)
	}
	goneFiles, goneBytes := blobFiles(t, root, gone)
	keptFiles, _ := blobFiles(t, root, kept)
	sigFiles, _ := blobFiles(t, root, sig)
	wantFiles(t, true, goneFiles...)

	// The registry is open: gc is refused and removes nothing.
	_, err := CollectGarbage(ctx, root, false, nil)
	if !errors.Is(err, ErrStorageLocked) || err.Error() != "a gpuaas server is using "+root+"; stop every replica, then run it again" {
		t.Fatalf("gc beside an open registry: %v, want the server-is-using refusal", err)
	}
	wantFiles(t, true, goneFiles...)

	env.tr.CloseIdleConnections()
	env.srv.Close()
	if err := env.reg.Close(); err != nil {
		t.Fatal(err)
	}
	dry, err := CollectGarbage(ctx, root, true, nil)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	want := GCResult{DryRun: true, Blobs: len(goneFiles), Bytes: goneBytes, LayerLinks: len(goneFiles) - 1}
	if dry != want {
		t.Fatalf("dry run = %+v, want %+v", dry, want)
	}
	wantFiles(t, true, goneFiles...)

	// While gc holds the storage, a registry does not open on it.
	held, err := lockStorage(root, true, "held by the test")
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(ctx, Config{RootDir: root, Host: "127.0.0.1:1"}, newTestAuthz(), nil)
	if !errors.Is(err, ErrStorageLocked) || !strings.Contains(err.Error(), root+" is being garbage-collected (gpuaas registry gc)") {
		t.Fatalf("New while gc holds the storage: %v, want the gc refusal", err)
	}
	if err := held.release(); err != nil {
		t.Fatal(err)
	}

	got, err := CollectGarbage(ctx, root, false, nil)
	want.DryRun = false
	if err != nil || got != want {
		t.Fatalf("gc = %+v, %v; want %+v", got, err, want)
	}
	wantFiles(t, false, goneFiles...)
	wantFiles(t, true, append(keptFiles, sigFiles...)...)
	if again, err := CollectGarbage(ctx, root, false, nil); err != nil || again != (GCResult{}) {
		t.Fatalf("second gc = %+v, %v; want nothing removed", again, err)
	}

	// A registry on the collected storage serves the kept image whole and
	// its signature tag.
	env2 := newTestEnv(t, func(c *Config) { c.RootDir = root })
	env2.authz.add("publisher", "s3cret", appRepo, ActionPull)
	opts = env2.opts(ctx, auth)
	repo = env2.ref(t, appRepo).Context()
	pulled, err := remote.Image(repo.Digest(keptDigest.String()), opts...)
	if err != nil {
		t.Fatalf("pull kept image: %v", err)
	}
	layers, _ := pulled.Layers()
	for _, l := range layers {
		rc, err := l.Compressed()
		if err == nil {
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
		if err != nil {
			t.Fatalf("read kept layer: %v", err)
		}
	}
	if _, err := pulled.RawConfigFile(); err != nil {
		t.Fatalf("read kept config: %v", err)
	}
	if desc, err := remote.Head(repo.Tag(sigTag.TagStr()), opts...); err != nil || desc.Digest != sigDigest {
		t.Fatalf("signature tag after gc: %v %v, want %s", desc, err, sigDigest)
	}
	if _, err := remote.Image(repo.Digest(goneDigest.String()), opts...); err == nil {
		t.Fatal("the deleted image still pulls after gc")
	}
}

// A registry nothing was ever pushed to has nothing to collect (its
// storage has no repositories directory, on which distribution's mark
// fails); a directory that is not there is not taken for one.
func TestCollectGarbageOfEmptyStorage(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, nil)
	root := env.reg.cfg.RootDir
	env.srv.Close()
	if err := env.reg.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := CollectGarbage(context.Background(), root, false, nil); err != nil || got != (GCResult{}) {
		t.Fatalf("gc of an empty registry = %+v, %v; want nothing removed", got, err)
	}
	// A first push begun and abandoned: the repository has an upload,
	// the registry no blob yet.
	if err := os.MkdirAll(filepath.Join(root, "docker/registry/v2/repositories/app/demo/_uploads/0193"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := CollectGarbage(context.Background(), root, false, nil); err != nil || got != (GCResult{}) {
		t.Fatalf("gc of a registry with an abandoned first upload = %+v, %v; want nothing removed", got, err)
	}
	missing := filepath.Join(root, "missing")
	if _, err := CollectGarbage(context.Background(), missing, false, nil); err == nil || !strings.Contains(err.Error(), missing+" is not a registry directory") {
		t.Fatalf("gc of a missing directory: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("gc created %s: %v", missing, err)
	}
}
