package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// Deleting an image gives its project's registry quota back, once its
// blobs were not pushed or referenced for artifacts.RegistryHoldIdle,
// except for a blob another manifest of the project still references;
// and the blobs, still stored (no garbage collection), count again when a
// manifest references them, though the client skips their upload: the
// re-push of the deleted image is refused over the quota.
func TestRegistryQuotaGivesBackDeletedImages(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		ctx, s, clk, recounter, host, intent := clockedQuotaRepos(t, d)
		repoA, cA := intent("free-a")
		repoB, cB := intent("free-b")

		shared := patterned(30, 10_000)
		imgA := quotaImage(t, patterned(31, 40_000), shared)
		imgB := quotaImage(t, shared, patterned(32, 20_000))
		layerC := patterned(33, 45_000)
		imgC := quotaImage(t, layerC)
		writeImage(t, ctx, host, repoA, cA, imgA, nil)
		writeImage(t, ctx, host, repoB, cB, imgB, nil)
		sizeB := imageBytes(t, imgB)
		want := imageBytes(t, imgA) + sizeB - int64(len(shared))
		if c, h := regUsage(t, s); c != want || h != 0 {
			t.Fatalf("after pushing A and B: %d committed, %d held; want %d, 0", c, h, want)
		}
		// C's layer does not fit beside A and B.
		err := pushLayer(ctx, host, repoA, cA, layerC)
		wantRegistryError(t, err, "DENIED", "--project-registry-quota-bytes")

		// The delete's recount keeps what was pushed just now: a push might
		// be about to reference it.
		dA := deleteImage(t, ctx, s, recounter, host, repoA, imgA)
		if c, h := regUsage(t, s); c != want || h != 0 {
			t.Fatalf("right after the delete: %d committed, %d held; want %d, 0", c, h, want)
		}
		clk.Advance(artifacts.RegistryHoldIdle(s.App.Config.StreamTimeout) + time.Minute)
		kickSweep(t, ctx, recounter)
		// A's blobs are given back but the one B references too.
		if c, h := regUsage(t, s); c != sizeB || h != 0 {
			t.Fatalf("after the recount: %d committed, %d held; want %d (image B only), 0", c, h, sizeB)
		}

		// C fits now (fresh credentials: the old ones expired with the clock).
		repoA, cA = intent("free-a")
		writeImage(t, ctx, host, repoA, cA, imgC, nil)
		want = sizeB + imageBytes(t, imgC)
		if c, h := regUsage(t, s); c != want || h != 0 {
			t.Fatalf("after pushing C: %d committed, %d held; want %d, 0", c, h, want)
		}

		// A again: its blobs are still stored in repoA, so the client
		// uploads none of them; its manifest counts them, which does not fit.
		writeImage(t, ctx, host, repoA, cA, imgA, func(err error) {
			wantRegistryError(t, err, "DENIED", "--project-registry-quota-bytes", dA.String())
		})
		if c, h := regUsage(t, s); c != want || h != 0 {
			t.Fatalf("after re-pushing A: %d committed, %d held; want %d, 0", c, h, want)
		}
		if left := leftUploads(t, s); len(left) != 0 {
			t.Fatalf("pushes left uploads: %v", left)
		}
	})
}

// clockedQuotaRepos is clockedQuotaServer with what a test pushes with:
// a context bounding it, the server's registry recount job, the
// registry's host and intent, which opens a repository of the dev project
// (or opens it again, with fresh credentials) for an app slug.
func clockedQuotaRepos(t *testing.T, d store.Dialect) (ctx context.Context, s *servertest.Server, clk *clock.Manual, recounter *worker.Periodic,
	host string, intent func(slug string) (string, regCreds)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s, clk, _ = clockedQuotaServer(t, ctx, d)
	recounter = s.App.RegistryRecounter()
	host = s.Admin().Do("GET", "/api/v1/apps/registry", nil).Want(t, 200).String("registry_host")
	intent = func(slug string) (string, regCreds) {
		return publishIntent(t, s.Admin(), s.Creds.ProjectID, map[string]any{"app_slug": slug, "app_version": "1.0.0", "artifact_name": "runtime"})
	}
	return ctx, s, clk, recounter, host, intent
}

// clockedQuotaServer starts a server with the registry quota of
// quotaServer on a manual clock, once its registry hold sweeper and its
// registry recount job have each run, and returns the sweeper.
func clockedQuotaServer(t *testing.T, ctx context.Context, d store.Dialect) (*servertest.Server, *clock.Manual, *worker.Periodic) {
	t.Helper()
	clk := clock.NewManual(time.Now())
	s := servertest.Start(t, d, servertest.WithClock(clk), func(c *config.Config) {
		c.RegistryQuota, c.MaxRegistryBlob = testRegistryQuota, testMaxRegBlob
	})
	sweeper := s.App.RegistryHoldSweeper()
	for _, w := range []*worker.Periodic{sweeper, s.App.RegistryRecounter()} {
		if err := w.WaitRuns(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	return s, clk, sweeper
}

// kickSweep runs w once more and waits for it.
func kickSweep(t *testing.T, ctx context.Context, w *worker.Periodic) {
	t.Helper()
	n := w.Runs()
	w.Kick()
	if err := w.WaitRuns(ctx, n+1); err != nil {
		t.Fatal(err)
	}
}

// quotaImage is an OCI image of one layer per argument.
func quotaImage(t *testing.T, layers ...[]byte) v1.Image {
	t.Helper()
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, l := range layers {
		var err error
		if img, err = mutate.AppendLayers(img, static.NewLayer(l, types.OCILayer)); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// imageBytes is what img stores: its layers, config and manifest.
func imageBytes(t *testing.T, img v1.Image) int64 {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	n := m.Config.Size + int64(len(raw))
	for _, l := range m.Layers {
		n += l.Size
	}
	return n
}

// writeImage pushes img to repo (tag latest); refused, when not nil, checks the
// push's error instead of requiring success.
func writeImage(t *testing.T, ctx context.Context, host, repo string, rc regCreds, img v1.Image, refused func(error)) {
	t.Helper()
	ref, err := name.NewTag(host+"/"+repo+":latest", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	err = remote.Write(ref, img, rc.opts(ctx)...)
	switch {
	case refused != nil:
		refused(err)
	case err != nil:
		t.Fatalf("push to %s: %v", repo, err)
	}
}

// deleteImage deletes the manifest of img from repo by digest
// (deleteManifest) and returns the digest.
func deleteImage(t *testing.T, ctx context.Context, s *servertest.Server, recounter *worker.Periodic, host, repo string, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	deleteManifest(t, ctx, s, recounter, host, repo, d)
	return d
}

// deleteManifest deletes manifest d (an image's or an index's) from repo
// with a token granting delete, signed by the server's registry (the
// platform issues none to its users), and waits for the run of recounter
// (the server's registry recount job) the delete kicks.
func deleteManifest(t *testing.T, ctx context.Context, s *servertest.Server, recounter *worker.Periodic, host, repo string, d v1.Hash) {
	t.Helper()
	n := recounter.Runs()
	tok, err := s.App.Registry().TokenHandler().Issue(registry.Subject{ID: "operator"},
		[]registry.Scope{{Type: "repository", Name: repo, Actions: []string{registry.ActionDelete}}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+host+"/v2/"+repo+"/manifests/"+d.String(), nil)
	req.Header.Set("Authorization", "Bearer "+tok.Token)
	wantStatus(t, http.DefaultClient, req, http.StatusAccepted)
	if err := recounter.WaitRuns(ctx, n+1); err != nil {
		t.Fatal(err)
	}
}

// A final PUT of a blob the project counts streams it for free, and its
// commit only marks the blob used again: a recount that runs while it
// streams must not give the blob back (unreferenced and idle though it
// is), or the commit would count it again past the quota, the room it
// left having been taken by another push meanwhile.
func TestRegistryQuotaFreePutOutlivesRecount(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		ctx, s, clk, recounter, host, intent := clockedQuotaRepos(t, d)
		repoA, cA := intent("put-a")
		layerX := patterned(40, 50_000)
		if err := pushLayer(ctx, host, repoA, cA, layerX); err != nil {
			t.Fatal(err)
		}
		// X is referenced by no manifest and idle: the next recount may
		// give it back.
		clk.Advance(artifacts.RegistryHoldIdle(s.App.Config.StreamTimeout) + time.Minute)
		repoA, cA = intent("put-a")
		repoB, cB := intent("put-b")
		imgI := quotaImage(t, patterned(42, 1_000))
		writeImage(t, ctx, host, repoB, cB, imgI, nil)

		// X again, streamed: once the registry stored its first bytes the
		// PUT was granted them for free.
		hc, loc := startUpload(t, ctx, host, repoA, cA)
		pr, pw := io.Pipe()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, withDigest(loc, digestOf(layerX)), pr)
		req.Header.Set("Content-Type", "application/octet-stream")
		put := make(chan *http.Response, 1)
		go func() {
			resp, err := hc.Do(req)
			if err != nil {
				t.Error(err)
			}
			put <- resp
		}()
		if _, err := pw.Write(layerX[:20_000]); err != nil {
			t.Fatal(err)
		}
		waitUploadStored(t, ctx, s, repoA, loc)

		// A manifest delete recounts now, X's PUT in flight.
		deleteImage(t, ctx, s, recounter, host, repoB, imgI)
		// Room for Y only if X was given back.
		errY := pushLayer(ctx, host, repoB, cB, patterned(41, 50_000))

		if _, err := pw.Write(layerX[20_000:]); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		resp := <-put
		if resp == nil {
			t.FailNow()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("PUT of X: %d, want 201", resp.StatusCode)
		}
		if c, h := regUsage(t, s); c+h > testRegistryQuota {
			t.Fatalf("after X's free PUT committed: %d committed, %d held, past the quota of %d", c, h, testRegistryQuota)
		}
		wantRegistryError(t, errY, "DENIED", "--project-registry-quota-bytes")
		if c, h := regUsage(t, s); c != int64(len(layerX))+imageBytes(t, imgI) || h != 0 {
			t.Fatalf("at the end: %d committed, %d held; want X and I's %d, 0", c, h, int64(len(layerX))+imageBytes(t, imgI))
		}
	})
}

// waitUploadStored waits until the registry has stored some of the data
// of the upload session at loc in repo: its request is past the quota's
// free grant, which comes before the registry reads a byte.
func waitUploadStored(t *testing.T, ctx context.Context, s *servertest.Server, repo, loc string) {
	t.Helper()
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(registryRoot(s), "docker/registry/v2/repositories", repo, "_uploads", path.Base(u.Path), "data")
	for {
		if fi, err := os.Stat(data); err == nil && fi.Size() > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("upload %s stored no data: %v", data, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
