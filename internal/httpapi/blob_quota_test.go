package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// blobProject drives blob uploads into the dev project of a server.
type blobProject struct {
	t    *testing.T
	s    *servertest.Server
	base string
}

func newBlobProject(t *testing.T, d store.Dialect, quota int64, opts ...servertest.Option) blobProject {
	opts = append(opts, func(c *config.Config) { c.ProjectBlobQuota = quota })
	s := servertest.Start(t, d, opts...)
	return blobProject{t: t, s: s, base: "/api/v1/projects/" + s.Creds.ProjectID + "/app-artifacts"}
}

// intent asks for a blob publish intent and returns its upload URL.
func (p blobProject) intent(name string) string {
	pi := p.s.Admin().Do("POST", p.base+"/publish-intents", map[string]any{"app_slug": "demo", "app_version": "1.0.0",
		"artifact_name": name, "artifact_kind": "blob", "source_type": "artifact_store"}).Want(p.t, 201)
	return pi.String("upload_url")
}

func blobDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// commit uploads data in one request and commits it, without registering.
func (p blobProject) commit(name string, data []byte) {
	p.s.Admin().Do("PUT", p.intent(name)+"?digest="+blobDigest(data), data,
		"Content-Range", fmt.Sprintf("bytes 0-%d/%d", len(data)-1, len(data))).Want(p.t, 201)
}

func (p blobProject) register(name string, data []byte) *servertest.Response {
	return p.s.Admin().Do("POST", p.base, map[string]any{"app_slug": "demo", "app_version": "1.0.0", "artifact_name": name,
		"artifact_kind": "blob", "source_type": "artifact_store", "digest": blobDigest(data),
		"source_uri": "artifact_store://projects/" + p.s.Creds.ProjectID + "/artifacts/demo/1.0.0/" + name})
}

// wantOverQuota checks a refusal names the project's figures.
func wantOverQuota(t *testing.T, r *servertest.Response, used, quota float64) {
	t.Helper()
	if r.Status != 422 || r.ErrorCode() != "blob_quota_exceeded" {
		t.Fatalf("over quota: %d %s", r.Status, r.Body)
	}
	e, _ := r.JSON["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	if d["used_bytes"] != used || d["quota_bytes"] != quota {
		t.Fatalf("over quota: details %v, want used_bytes %v and quota_bytes %v", d, used, quota)
	}
}

// Content committed but never registered counts against the quota: an
// upload that never registers cannot be repeated until the disk is full.
func TestBlobQuotaCountsUnregisteredContent(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		p := newBlobProject(t, d, 6000)
		data := bytes.Repeat([]byte("u"), 4000)
		p.commit("first", data)
		r := p.s.Admin().Do("PATCH", p.intent("second"), data, "Upload-Offset", "0")
		wantOverQuota(t, r, 4000, 6000)
		// Registering the first content does not count it twice.
		p.register("first", data).Want(t, 201)
		r = p.s.Admin().Do("PATCH", p.intent("third"), data, "Upload-Offset", "0")
		wantOverQuota(t, r, 4000, 6000)
		p.s.Admin().Do("PATCH", p.intent("fourth"), data[:2000], "Upload-Offset", "0").Want(t, 200)
	})
}

// A project's uploads in progress count together: several that each fit
// the quota alone cannot together take more than it.
func TestBlobQuotaCountsUploadsInProgress(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		p := newBlobProject(t, d, 6000)
		data := bytes.Repeat([]byte("p"), 4000)
		first := p.intent("first")
		p.s.Admin().Do("PATCH", first, data, "Upload-Offset", "0").Want(t, 200)
		r := p.s.Admin().Do("PATCH", p.intent("second"), data, "Upload-Offset", "0")
		wantOverQuota(t, r, 4000, 6000)
		// Aborting the first gives its bytes back.
		p.s.Admin().Do("DELETE", first, nil).Want(t, 204)

		// Four at once, 2500 bytes each, against 6000: at most two fit.
		const n, size = 4, 2500
		urls := make([]string, n)
		for i := range urls {
			urls[i] = p.intent(fmt.Sprintf("c%d", i))
		}
		admin := p.s.Admin()
		results := make([]*servertest.Response, n)
		var wg sync.WaitGroup
		for i := range urls {
			wg.Go(func() {
				results[i] = admin.Do("PATCH", urls[i], bytes.Repeat([]byte{byte('a' + i)}, size), "Upload-Offset", "0")
			})
		}
		wg.Wait()
		accepted := 0
		for _, r := range results {
			switch {
			case r.Status == 200:
				accepted++
			case r.Status != 422 || r.ErrorCode() != "blob_quota_exceeded":
				t.Fatalf("concurrent upload: %d %s", r.Status, r.Body)
			}
		}
		if accepted == 0 || accepted*size > 6000 {
			t.Fatalf("%d concurrent uploads of %d bytes accepted against a quota of 6000", accepted, size)
		}
	})
}

// The sweeper removes content committed and never registered once its
// publish intent can no longer register it, and keeps content a registered
// artifact references (the blobs are shared by content) and content
// committed recently.
func TestBlobSweeperRemovesUnregisteredContent(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		clk, p := sweeperProject(t, d)
		kept := bytes.Repeat([]byte("k"), 3000)
		orphan := bytes.Repeat([]byte("o"), 3000)
		p.commit("kept", kept)
		art := p.register("kept", kept).Want(t, 201).String("id")
		p.commit("copy", kept) // the registered artifact's content, at another key
		p.commit("orphan", orphan)
		wantOverQuota(t, p.s.Admin().Do("PATCH", p.intent("more"), orphan[:2000], "Upload-Offset", "0"), 9000, 10000)

		clk.Advance(artifacts.AbandonedUploadAge + time.Minute)
		fresh := bytes.Repeat([]byte("f"), 1000)
		p.commit("fresh", fresh)
		sweep(t, p.s)

		for name, data := range map[string][]byte{"orphan": orphan, "copy": kept} {
			if r := p.register(name, data); r.Status != 422 || r.ErrorCode() != "object_not_found" {
				t.Fatalf("registering swept content %q: %d %s", name, r.Status, r.Body)
			}
		}
		if blobFiles(t, p.s, orphan) != 0 {
			t.Fatal("the bytes of swept content are still on disk")
		}
		if blobFiles(t, p.s, kept) != 1 {
			t.Fatal("the bytes a registered artifact references are gone")
		}
		r := p.s.Admin().Do("GET", p.base+"/"+art+"/content", nil).Want(t, 200)
		if !bytes.Equal(r.Body, kept) {
			t.Fatalf("registered content after the sweep: %d bytes, want %d", len(r.Body), len(kept))
		}
		p.register("fresh", fresh).Want(t, 201)
		// What was swept no longer counts: 3000 + 1000 registered.
		p.s.Admin().Do("PATCH", p.intent("more2"), bytes.Repeat([]byte("m"), 6000), "Upload-Offset", "0").Want(t, 200)
	})
}

// A removal that fails leaves the content taken (registration refused)
// and the next pass removes it; the tombstone that refuses a late
// registration goes once no publish intent alive at the sweep can try.
func TestBlobSweeperRetriesAFailedRemoval(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		clk, p, orphan := committedUnregistered(t, d, "orphan")
		clk.Advance(artifacts.AbandonedUploadAge + time.Minute)

		// Even root cannot remove a directory that is not empty: the blob's
		// path holds one while the first pass runs.
		path := blobPath(t, p.s, orphan)
		noErr(t, os.Rename(path, path+".aside"))
		noErr(t, os.MkdirAll(filepath.Join(path, "busy"), 0o755))
		if err := sweepErr(p.s); err == nil {
			t.Fatal("the sweep reported no error although the content could not be removed")
		}
		if r := p.register("orphan", orphan); r.Status != 422 || r.ErrorCode() != "object_not_found" {
			t.Fatalf("registering content being swept: %d %s", r.Status, r.Body)
		}
		noErr(t, os.RemoveAll(path))
		noErr(t, os.Rename(path+".aside", path))
		clk.Advance(10 * time.Minute) // the next pass
		sweep(t, p.s)
		if blobFiles(t, p.s, orphan) != 0 {
			t.Fatal("the bytes of content whose removal failed once are still on disk after the next pass")
		}

		tombstone := func() bool {
			swept, err := store.Artifacts(p.s.DB).Read().BlobContentSwept(context.Background(), p.s.Creds.ProjectID, p.uri("orphan"), blobDigest(orphan))
			noErr(t, err)
			return swept
		}
		if !tombstone() {
			t.Fatal("no tombstone right after the sweep")
		}
		clk.Advance(artifacts.MaxIntentTTL + time.Minute)
		sweep(t, p.s)
		if tombstone() {
			t.Fatal("tombstone kept past every intent's lifetime")
		}
	})
}

// An upload whose content the blob store committed but whose row still
// says uploading (the commit's last step failed) is swept as committed
// content, not forgotten with its bytes left on disk.
func TestBlobSweeperSweepsContentCommittedButRecordedUploading(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		clk, p, lost := committedUnregistered(t, d, "lost")
		ctx := context.Background()
		noErr(t, store.Artifacts(p.s.DB).InTx(ctx, func(q artifacts.Queries) error {
			// What a failed final step of the commit leaves.
			n, err := q.ClaimCommittedBlob(ctx, p.s.Creds.ProjectID, p.uri("lost"), blobDigest(lost))
			if err != nil || n != 1 {
				return fmt.Errorf("claim = %d %v", n, err)
			}
			_, err = q.ReserveBlobUpload(ctx, artifacts.BlobUpload{UploadID: "0b6a3d34-1f4f-4a55-9d39-2f4c2bde5c11", ProjectID: p.s.Creds.ProjectID,
				IntentID: "i", SourceURI: p.uri("lost"), Bytes: int64(len(lost)), Digest: blobDigest(lost), CreatedAt: clk.Now(), UpdatedAt: clk.Now()})
			return err
		}))
		clk.Advance(artifacts.AbandonedUploadAge + time.Minute)
		sweep(t, p.s)
		if blobFiles(t, p.s, lost) != 0 {
			t.Fatal("the bytes of content committed but recorded as uploading are still on disk after the sweep")
		}
		if r := p.register("lost", lost); r.Status != 422 || r.ErrorCode() != "object_not_found" {
			t.Fatalf("registering swept content: %d %s", r.Status, r.Body)
		}
	})
}

// sweeperProject is a project with a 10000-byte blob quota on a server
// whose clock the test moves.
func sweeperProject(t *testing.T, d store.Dialect) (*clock.Manual, blobProject) {
	clk := clock.NewManual(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	return clk, newBlobProject(t, d, 10000, servertest.WithClock(clk))
}

// committedUnregistered commits 3000 bytes as name on a sweeperProject,
// without registering them.
func committedUnregistered(t *testing.T, d store.Dialect, name string) (*clock.Manual, blobProject, []byte) {
	clk, p := sweeperProject(t, d)
	data := bytes.Repeat([]byte(name[:1]), 3000)
	p.commit(name, data)
	return clk, p, data
}

func (p blobProject) uri(name string) string {
	return "artifact_store://projects/" + p.s.Creds.ProjectID + "/artifacts/demo/1.0.0/" + name
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// sweep runs the server's blob upload sweeper once, now.
func sweep(t *testing.T, s *servertest.Server) {
	t.Helper()
	if err := sweepErr(s); err != nil {
		t.Fatalf("sweep: %v", err)
	}
}

func sweepErr(s *servertest.Server) error {
	for _, w := range s.App.Workers {
		if p, ok := w.(*worker.Periodic); ok && p.Name == "blob-upload-sweeper" {
			return p.Run(context.Background())
		}
	}
	return errors.New("the server has no blob upload sweeper")
}

// blobPath is the one file holding data's bytes under the server's data
// directory.
func blobPath(t *testing.T, s *servertest.Server, data []byte) string {
	t.Helper()
	sum := sha256.Sum256(data)
	name := hex.EncodeToString(sum[:])
	var found []string
	noErr(t, filepath.WalkDir(s.App.Config.DataDir, func(path string, e fs.DirEntry, err error) error {
		if err == nil && e.Name() == name {
			found = append(found, path)
		}
		return err
	}))
	if len(found) != 1 {
		t.Fatalf("files holding the content: %v, want one", found)
	}
	return found[0]
}

// blobFiles counts the files holding data's bytes under the server's data
// directory (the blob store keeps content by its sha256).
func blobFiles(t *testing.T, s *servertest.Server, data []byte) int {
	t.Helper()
	sum := sha256.Sum256(data)
	name := hex.EncodeToString(sum[:])
	n := 0
	err := filepath.WalkDir(s.App.Config.DataDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Name() == name {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
