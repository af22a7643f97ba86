package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

const (
	testRegistryQuota = 100_000
	testMaxRegBlob    = 60_000
)

// quotaServer starts a server whose projects may hold 100,000 bytes in
// the registry, 60,000 in one blob, and opens two repositories of its dev
// project with publish intents.
func quotaServer(t *testing.T, d store.Dialect) (s *servertest.Server, host, repo1 string, c1 regCreds, repo2 string, c2 regCreds) {
	t.Helper()
	s = servertest.Start(t, d, func(c *config.Config) {
		c.RegistryQuota, c.MaxRegistryBlob = testRegistryQuota, testMaxRegBlob
	})
	admin := s.Admin()
	pid := s.Creds.ProjectID
	host = admin.Do("GET", "/api/v1/apps/registry", nil).Want(t, 200).String("registry_host")
	repo1, c1 = publishIntent(t, admin, pid, map[string]any{"app_slug": "quota-a", "app_version": "1.0.0", "artifact_name": "runtime"})
	repo2, c2 = publishIntent(t, admin, pid, map[string]any{"app_slug": "quota-b", "app_version": "1.0.0", "artifact_name": "runtime"})
	return s, host, repo1, c1, repo2, c2
}

// patterned returns n bytes no other call with another seed repeats.
func patterned(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed ^ byte(i*7+i/251)
	}
	return b
}

// regUsage reads the project's committed and held registry bytes.
func regUsage(t *testing.T, s *servertest.Server) (committed, held int64) {
	t.Helper()
	c, h, err := s.DB.Queries().RegistryUsage(context.Background(), s.Creds.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	return c, h
}

// pushLayer pushes data as one blob into repo the way crane does (POST,
// a streamed PATCH, PUT).
func pushLayer(ctx context.Context, host, repo string, rc regCreds, data []byte) error {
	r, err := name.NewRepository(host+"/"+repo, name.Insecure)
	if err != nil {
		return err
	}
	return remote.WriteLayer(r, static.NewLayer(data, types.OCILayer), rc.opts(ctx)...)
}

// wantRegistryError asserts err is the registry's error code whose
// message names what the pusher can do.
func wantRegistryError(t *testing.T, err error, code string, mentions ...string) {
	t.Helper()
	var te *transport.Error
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		t.Fatalf("want registry error %s, got %v", code, err)
	}
	if string(te.Errors[0].Code) != code {
		t.Fatalf("want %s, got %s: %s", code, te.Errors[0].Code, te.Errors[0].Message)
	}
	for _, m := range mentions {
		if !strings.Contains(te.Errors[0].Message, m) {
			t.Fatalf("message %q does not mention %q", te.Errors[0].Message, m)
		}
	}
}

// registryRoot is where the server's embedded registry stores its data.
func registryRoot(s *servertest.Server) string {
	if s.App.Config.RegistryDir != "" {
		return s.App.Config.RegistryDir
	}
	return filepath.Join(s.App.Config.DataDir, "registry")
}

// leftUploads lists upload sessions the registry still stores.
func leftUploads(t *testing.T, s *servertest.Server) []string {
	t.Helper()
	root := registryRoot(s)
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && filepath.Base(filepath.Dir(p)) == "_uploads" {
			out = append(out, p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

// A project's registry pushes are held against its quota as they stream:
// an over-size blob and an over-quota one are refused with the
// distribution API's error and leave nothing stored; an exact fit is
// accepted; a blob the project holds already costs nothing again, in any
// of its repositories.
func TestRegistryQuota(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		ctx := context.Background()
		s, host, repo1, c1, repo2, c2 := quotaServer(t, d)

		// One blob past the size limit.
		err := pushLayer(ctx, host, repo1, c1, patterned(1, testMaxRegBlob+1))
		wantRegistryError(t, err, "SIZE_INVALID", "60000", "--max-registry-blob-bytes")
		if c, h := regUsage(t, s); c != 0 || h != 0 {
			t.Fatalf("after an over-size push: %d committed, %d held; want 0, 0", c, h)
		}
		if left := leftUploads(t, s); len(left) != 0 {
			t.Fatalf("an over-size push left uploads: %v", left)
		}

		a := patterned(2, 50_000)
		if err := pushLayer(ctx, host, repo1, c1, a); err != nil {
			t.Fatal(err)
		}
		// 50,001 more bytes do not fit in the 50,000 left.
		err = pushLayer(ctx, host, repo1, c1, patterned(3, 50_001))
		wantRegistryError(t, err, "DENIED", "100000", "--project-registry-quota-bytes")
		if c, h := regUsage(t, s); c != 50_000 || h != 0 {
			t.Fatalf("after an over-quota push: %d committed, %d held; want 50000, 0", c, h)
		}
		if left := leftUploads(t, s); len(left) != 0 {
			t.Fatalf("an over-quota push left uploads: %v", left)
		}
		// A chunk streamed into an upload is held until the upload is
		// committed, and then counted as the blob.
		chunk := patterned(5, 30_000)
		hc, loc := startUpload(t, ctx, host, repo1, c1)
		patch, _ := http.NewRequestWithContext(ctx, http.MethodPatch, loc, io.MultiReader(bytes.NewReader(chunk)))
		patch.Header.Set("Content-Type", "application/octet-stream")
		next := wantStatus(t, hc, patch, http.StatusAccepted).Header.Get("Location")
		if c, h := regUsage(t, s); c != 50_000 || h != 30_000 {
			t.Fatalf("during an upload of 30,000 bytes: %d committed, %d held; want 50000, 30000", c, h)
		}
		if strings.HasPrefix(next, "/") {
			next = "http://" + host + next
		}
		put, _ := http.NewRequestWithContext(ctx, http.MethodPut, next+"&digest="+digestOf(chunk), nil)
		wantStatus(t, hc, put, http.StatusCreated)
		if c, h := regUsage(t, s); c != 80_000 || h != 0 {
			t.Fatalf("after the upload: %d committed, %d held; want 80000, 0", c, h)
		}
		// 20,000 more fit: the quota is full to the byte.
		if err := pushLayer(ctx, host, repo2, c2, patterned(4, 20_000)); err != nil {
			t.Fatalf("exact fit: %v", err)
		}
		if c, h := regUsage(t, s); c != testRegistryQuota || h != 0 {
			t.Fatalf("after the exact fit: %d committed, %d held; want %d, 0", c, h, testRegistryQuota)
		}

		// The same blob again: in its repository (the client finds it
		// there), and uploaded whole into the other one.
		if err := pushLayer(ctx, host, repo1, c1, a); err != nil {
			t.Fatalf("re-push into the same repository: %v", err)
		}
		monolithicPut(t, ctx, host, repo2, c2, a, http.StatusCreated)
		if c, h := regUsage(t, s); c != testRegistryQuota || h != 0 {
			t.Fatalf("after re-pushes: %d committed, %d held; want %d, 0", c, h, testRegistryQuota)
		}
		// Claiming a held digest buys no more than its size.
		fake := append(bytes.Clone(a), 'x')
		monolithicPutDigest(t, ctx, host, repo2, c2, fake, digestOf(a), http.StatusForbidden)
		if c, h := regUsage(t, s); c != testRegistryQuota || h != 0 {
			t.Fatalf("after a false digest: %d committed, %d held; want %d, 0", c, h, testRegistryQuota)
		}
		if left := leftUploads(t, s); len(left) != 0 {
			t.Fatalf("a refused push left uploads: %v", left)
		}
	})
}

// Pushes of one project at the same time, on its two repositories, never
// together store more than its quota.
func TestRegistryQuotaConcurrentPushes(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		ctx := context.Background()
		s, host, repo1, c1, repo2, c2 := quotaServer(t, d)

		const n, size = 6, 40_000 // 240,000 bytes against 100,000
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			repo, rc := repo1, c1
			if i%2 == 1 {
				repo, rc = repo2, c2
			}
			wg.Go(func() { errs[i] = pushLayer(ctx, host, repo, rc, patterned(byte(10+i), size)) })
		}
		wg.Wait()
		var stored int64
		for _, err := range errs {
			if err == nil {
				stored += size
				continue
			}
			wantRegistryError(t, err, "DENIED", "--project-registry-quota-bytes")
		}
		c, h := regUsage(t, s)
		if stored > testRegistryQuota || c != stored || h != 0 {
			t.Fatalf("%d bytes accepted, %d committed, %d held; quota %d", stored, c, h, testRegistryQuota)
		}
		if left := leftUploads(t, s); len(left) != 0 {
			t.Fatalf("refused pushes left uploads: %v", left)
		}
	})
}

func digestOf(b []byte) string {
	l := static.NewLayer(b, types.OCILayer)
	d, _ := l.Digest()
	return d.String()
}

// monolithicPut uploads data as one PUT naming its digest.
func monolithicPut(t *testing.T, ctx context.Context, host, repo string, rc regCreds, data []byte, want int) {
	t.Helper()
	monolithicPutDigest(t, ctx, host, repo, rc, data, digestOf(data), want)
}

func monolithicPutDigest(t *testing.T, ctx context.Context, host, repo string, rc regCreds, data []byte, digest string, want int) {
	t.Helper()
	hc, loc := startUpload(t, ctx, host, repo, rc)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, withDigest(loc, digest), bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/octet-stream")
	wantStatus(t, hc, req, want)
}

// withDigest is the URL of upload session loc's final PUT of digest.
func withDigest(loc, digest string) string {
	if strings.Contains(loc, "?") {
		return loc + "&digest=" + digest
	}
	return loc + "?digest=" + digest
}

// startUpload opens an upload session in repo and returns a client that
// holds push rights there and the session's URL.
func startUpload(t *testing.T, ctx context.Context, host, repo string, rc regCreds) (*http.Client, string) {
	t.Helper()
	r, err := name.NewRepository(host+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := transport.NewWithContext(ctx, r.Registry, &authn.Basic{Username: rc.user, Password: rc.pass}, http.DefaultTransport,
		[]string{r.Scope(transport.PushScope)})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: rt}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+host+"/v2/"+repo+"/blobs/uploads/", nil)
	resp := wantStatus(t, hc, req, http.StatusAccepted)
	loc := resp.Header.Get("Location")
	if strings.HasPrefix(loc, "/") {
		loc = "http://" + host + loc
	}
	return hc, loc
}

func wantStatus(t *testing.T, hc *http.Client, req *http.Request, want int) *http.Response {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", req.Method, req.URL.Path, resp.StatusCode, body, want)
	}
	return resp
}

// A push abandoned halfway, and a manifest's hold a crash left behind,
// stop counting against the project's registry quota once idle past
// artifacts.RegistryHoldIdle: the sweeper releases them and removes the
// upload's data, so its continuation is refused with BLOB_UPLOAD_UNKNOWN
// and counts nothing; a push written to since is kept and can still be
// committed; and the project, locked out before, can push again.
func TestRegistryQuotaSweepsAbandonedPushes(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, clk, sweeper := clockedQuotaServer(t, ctx, d)
		admin := s.Admin()
		pid := s.Creds.ProjectID
		host := admin.Do("GET", "/api/v1/apps/registry", nil).Want(t, 200).String("registry_host")
		repo1, c1 := publishIntent(t, admin, pid, map[string]any{"app_slug": "sweep-a", "app_version": "1.0.0", "artifact_name": "runtime"})
		repo2, c2 := publishIntent(t, admin, pid, map[string]any{"app_slug": "sweep-b", "app_version": "1.0.0", "artifact_name": "runtime"})

		// Abandoned: 60,000 bytes streamed into an upload never finished.
		hcA, locA := startUpload(t, ctx, host, repo1, c1)
		nextA := patchChunk(t, ctx, hcA, host, locA, patterned(20, 60_000), http.StatusAccepted)
		// A crash while a manifest was being stored left its hold.
		crashed := artifacts.RegistryHold{ID: "put:" + uuid.NewString(), ProjectID: pid, Repository: repo1, SizeBytes: 1_000,
			CreatedAt: clk.Now(), UpdatedAt: clk.Now()}
		if err := s.DB.Queries().PutRegistryHold(ctx, crashed); err != nil {
			t.Fatal(err)
		}
		// Live: continued just before the sweep, by a request that (like
		// one still waiting for its bytes) sends nothing.
		hcB, locB := startUpload(t, ctx, host, repo2, c2)
		live := patterned(21, 10_000)
		nextB := patchChunk(t, ctx, hcB, host, locB, live[:5_000], http.StatusAccepted)
		if c, h := regUsage(t, s); c != 0 || h != 66_000 {
			t.Fatalf("before the sweep: %d committed, %d held; want 0, 66000", c, h)
		}
		// 40,000 bytes more do not fit while the abandoned push holds its bytes.
		err := pushLayer(ctx, host, repo2, c2, patterned(22, 40_000))
		wantRegistryError(t, err, "DENIED", "--project-registry-quota-bytes")

		clk.Advance(artifacts.RegistryHoldIdle(s.App.Config.StreamTimeout) - time.Minute)
		nextB = patchChunk(t, ctx, hcB, host, nextB, nil, http.StatusAccepted)
		clk.Advance(2 * time.Minute)
		kickSweep(t, ctx, sweeper)
		if c, h := regUsage(t, s); c != 0 || h != 5_000 {
			t.Fatalf("after the sweep: %d committed, %d held; want 0, 5000 (the live push only)", c, h)
		}
		if left := leftUploads(t, s); len(left) != 1 || !strings.Contains(left[0], repo2) {
			t.Fatalf("uploads left after the sweep: %v; want the live one of %s only", left, repo2)
		}

		// The abandoned upload cannot be continued, and its try holds nothing.
		patchChunk(t, ctx, hcA, host, nextA, patterned(23, 1_000), http.StatusNotFound)
		if c, h := regUsage(t, s); c != 0 || h != 5_000 {
			t.Fatalf("after continuing a swept upload: %d committed, %d held; want 0, 5000", c, h)
		}

		// The live push goes on and commits, and the project pushes again with fresh
		// credentials (the old ones expired with the clock).
		nextB = patchChunk(t, ctx, hcB, host, nextB, live[5_000:], http.StatusAccepted)
		put, _ := http.NewRequestWithContext(ctx, http.MethodPut, nextB+"&digest="+digestOf(live), nil)
		wantStatus(t, hcB, put, http.StatusCreated)
		repo3, c3 := publishIntent(t, s.Admin(), pid, map[string]any{"app_slug": "sweep-c", "app_version": "1.0.0", "artifact_name": "runtime"})
		if err := pushLayer(ctx, host, repo3, c3, patterned(22, 40_000)); err != nil {
			t.Fatalf("push after the sweep: %v", err)
		}
		if c, h := regUsage(t, s); c != 50_000 || h != 0 {
			t.Fatalf("at the end: %d committed, %d held; want 50000, 0", c, h)
		}
	})
}

// patchChunk PATCHes chunk into the upload at loc and, on 202, returns
// the upload's next location; on a 404 it checks the registry's code is
// BLOB_UPLOAD_UNKNOWN.
func patchChunk(t *testing.T, ctx context.Context, hc *http.Client, host, loc string, chunk []byte, want int) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, loc, bytes.NewReader(chunk))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if want == http.StatusNotFound {
		err := transport.CheckError(resp, http.StatusAccepted)
		wantRegistryError(t, err, "BLOB_UPLOAD_UNKNOWN")
		return ""
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("PATCH %s: %d, want %d", req.URL.Path, resp.StatusCode, want)
	}
	next := resp.Header.Get("Location")
	if strings.HasPrefix(next, "/") {
		next = "http://" + host + next
	}
	return next
}
