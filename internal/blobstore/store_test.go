package blobstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testKey = Key{ProjectID: "5b0c7d1e-8f2a-4c3b-9d4e-0a1b2c3d4e5f", App: "llm-server", Version: "1.2.0-rc.1", Name: "weights"}

func newStore(t *testing.T, opts Options) (*Store, string) {
	t.Helper()
	root := t.TempDir()
	s, err := New(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, root
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{byte(seed)}).Read(b)
	return b
}

// failingReader yields data and then fails, like a client connection that drops.
type failingReader struct {
	r io.Reader
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, errors.New("connection reset by peer")
	}
	return n, err
}

// listFiles returns every regular file under dir, relative to it.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)
	s, root := newStore(t, Options{Clock: func() time.Time { return now }})
	ctx := t.Context()
	data := randomBytes(3<<20+17, 1)

	id, err := s.Begin(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Append(ctx, id, 0, bytes.NewReader(data[:1000]))
	if err != nil || n != 1000 {
		t.Fatalf("append: %d %v", n, err)
	}
	n, err = s.Append(ctx, id, 1000, bytes.NewReader(data[1000:]))
	if err != nil || n != int64(len(data)) {
		t.Fatalf("append: %d %v", n, err)
	}
	obj, err := s.Commit(ctx, id, digestOf(data))
	if err != nil {
		t.Fatal(err)
	}
	want := Object{Key: testKey, Digest: digestOf(data), Size: int64(len(data)), CommittedAt: now}
	if obj != want {
		t.Fatalf("commit = %+v, want %+v", obj, want)
	}
	got, err := s.Stat(ctx, testKey)
	if err != nil || got != want {
		t.Fatalf("stat = %+v %v", got, err)
	}
	rc, err := s.Open(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(back, data) {
		t.Fatalf("read back %d bytes, err %v", len(back), err)
	}
	// The upload is gone; only the blob and the reference remain.
	files := listFiles(t, root)
	wantFiles := []string{
		"blobs/sha256/" + obj.Digest[7:9] + "/" + obj.Digest[7:],
		"refs/" + testKey.Path(),
	}
	if strings.Join(files, ",") != strings.Join(wantFiles, ",") {
		t.Fatalf("files = %v, want %v", files, wantFiles)
	}
	if _, err := s.Status(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("status after commit: %v", err)
	}
	// Stat of another key: not found.
	other := testKey
	other.Name = "tokenizer"
	if _, err := s.Stat(ctx, other); !errors.Is(err, ErrNotFound) || !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("stat other: %v", err)
	}
	if _, err := s.Open(ctx, other); !errors.Is(err, ErrNotFound) {
		t.Fatalf("open other: %v", err)
	}
}

func TestEmptyObject(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, Options{})
	ctx := t.Context()
	id, err := s.Begin(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.Commit(ctx, id, digestOf(nil))
	if err != nil || obj.Size != 0 {
		t.Fatalf("%+v %v", obj, err)
	}
}

func TestResume(t *testing.T) {
	t.Parallel()
	s, root := newStore(t, Options{CheckpointBytes: 64 << 10})
	ctx := t.Context()
	data := randomBytes(1<<20, 2)

	id, err := s.Begin(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	// The client's connection drops after 300 KiB: what arrived is kept.
	n, err := s.Append(ctx, id, 0, &failingReader{r: bytes.NewReader(data[:300<<10])})
	if err == nil || n != 300<<10 {
		t.Fatalf("append = %d, %v; want %d and an error", n, err, 300<<10)
	}
	st, err := s.Status(ctx, id)
	if err != nil || st.Offset != 300<<10 || st.Key != testKey {
		t.Fatalf("status = %+v %v", st, err)
	}

	// The process restarts; a crash had also left bytes after the last checkpoint.
	f, err := os.OpenFile(filepath.Join(root, "uploads", id, "data"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("garbage written after the checkpoint")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s2, err := New(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err = s2.Status(ctx, id)
	if err != nil || st.Offset != 300<<10 {
		t.Fatalf("status after restart = %+v %v", st, err)
	}
	n, err = s2.Append(ctx, id, st.Offset, bytes.NewReader(data[st.Offset:]))
	if err != nil || n != int64(len(data)) {
		t.Fatalf("resume append = %d %v", n, err)
	}
	obj, err := s2.Commit(ctx, id, digestOf(data))
	if err != nil || obj.Size != int64(len(data)) {
		t.Fatalf("commit = %+v %v", obj, err)
	}
}

func TestWrongOffsetRefused(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, Options{})
	ctx := t.Context()
	id, err := s.Begin(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, id, 0, strings.NewReader("0123456789")); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 5, 11, -1} {
		n, err := s.Append(ctx, id, off, strings.NewReader("XXXX"))
		var oe *OffsetError
		if !errors.Is(err, ErrOffsetMismatch) || !errors.As(err, &oe) || oe.Current != 10 || n != 10 {
			t.Fatalf("append at %d: n=%d err=%v", off, n, err)
		}
		if e, ok := errdefs.As(err); !ok || e.Kind != errdefs.KindConflict || e.Details["offset"] != int64(10) {
			t.Fatalf("append at %d: not a conflict with the offset in details: %#v", off, e)
		}
	}
	if _, err := s.Append(ctx, id, 10, strings.NewReader("abc")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, id, digestOf([]byte("0123456789abc"))); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentAppendsAtSameOffset(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, Options{})
	ctx := t.Context()
	id, err := s.Begin(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var ok, refused atomic.Int32
	for range 8 {
		wg.Go(func() {
			_, err := s.Append(ctx, id, 0, strings.NewReader("chunk"))
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrOffsetMismatch):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1 || refused.Load() != 7 {
		t.Fatalf("ok=%d refused=%d", ok.Load(), refused.Load())
	}
}

func TestDigestMismatchLeavesNothing(t *testing.T) {
	t.Parallel()
	s, root := newStore(t, Options{})
	ctx := t.Context()
	id, err := s.Begin(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, id, 0, strings.NewReader("the real content")); err != nil {
		t.Fatal(err)
	}
	// A malformed digest is a client error that keeps the upload.
	if _, err := s.Commit(ctx, id, "sha256:nope"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("malformed digest: %v", err)
	}
	if _, err := s.Status(ctx, id); err != nil {
		t.Fatalf("upload should survive a malformed digest: %v", err)
	}
	_, err = s.Commit(ctx, id, digestOf([]byte("other content")))
	if !errors.Is(err, ErrDigestMismatch) || errdefs.KindOf(err) != errdefs.KindUnprocessable {
		t.Fatalf("commit = %v, want digest mismatch", err)
	}
	if _, err := s.Stat(ctx, testKey); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stat = %v", err)
	}
	if _, err := s.Status(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("status = %v", err)
	}
	if files := listFiles(t, root); len(files) != 0 {
		t.Fatalf("left behind: %v", files)
	}
}

func TestWriteOnceAndDedupe(t *testing.T) {
	t.Parallel()
	s, root := newStore(t, Options{})
	ctx := t.Context()
	put := func(k Key, content string) (Object, error) {
		id, err := s.Begin(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, id, 0, strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
		return s.Commit(ctx, id, digestOf([]byte(content)))
	}
	first, err := put(testKey, "v1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := put(testKey, "v1")
	if err != nil || again != first {
		t.Fatalf("same content again: %+v %v", again, err)
	}
	if _, err := put(testKey, "v2"); !errors.Is(err, ErrAlreadyExists) || errdefs.KindOf(err) != errdefs.KindAlreadyExists {
		t.Fatalf("other content: %v", err)
	}
	k2 := testKey
	k2.Version = "1.3.0"
	if _, err := put(k2, "v1"); err != nil {
		t.Fatal(err)
	}
	// Two keys, one blob; no uploads left.
	var blobs, uploads int
	for _, f := range listFiles(t, root) {
		switch {
		case strings.HasPrefix(f, "blobs/"):
			blobs++
		case strings.HasPrefix(f, "uploads/"):
			uploads++
		}
	}
	if blobs != 1 || uploads != 0 {
		t.Fatalf("blobs=%d uploads=%d", blobs, uploads)
	}
}

func TestMaxObjectSizeAbortAndPurge(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, _ := newStore(t, Options{MaxObjectSize: 10, Clock: clock})
	ctx := t.Context()
	id, err := s.Begin(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, id, 0, strings.NewReader("01234567890")); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("append = %v", err)
	}
	if err := s.Abort(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second abort = %v", err)
	}
	stale, err := s.Begin(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	fresh, err := s.Begin(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.PurgeUploads(ctx, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("purge = %d %v", n, err)
	}
	if _, err := s.Status(ctx, stale); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stale upload: %v", err)
	}
	if _, err := s.Status(ctx, fresh); err != nil {
		t.Fatalf("fresh upload: %v", err)
	}
}

func TestPathTraversalRefused(t *testing.T) {
	t.Parallel()
	s, root := newStore(t, Options{})
	ctx := t.Context()
	bad := []Key{
		{ProjectID: "..", App: "a", Version: "1", Name: "n"},
		{ProjectID: "p", App: "..", Version: "1", Name: "n"},
		{ProjectID: "p", App: "a", Version: "..", Name: "n"},
		{ProjectID: "p", App: "a", Version: "1", Name: ".."},
		{ProjectID: "p", App: "a", Version: "1", Name: "../../../etc/passwd"},
		{ProjectID: "p", App: "a", Version: "1", Name: "/etc/passwd"},
		{ProjectID: "p", App: "a/b", Version: "1", Name: "n"},
		{ProjectID: "p", App: "a", Version: "1", Name: ".hidden"},
		{ProjectID: "p", App: "a", Version: "1", Name: "n\x00"},
		{ProjectID: "p", App: "a", Version: "1", Name: `..\..\x`},
		{ProjectID: "P", App: "a", Version: "1", Name: "n"},
		{ProjectID: "p", App: "a-", Version: "1", Name: "n"},
		{ProjectID: "p", App: "a", Version: "1", Name: ""},
		{ProjectID: "p", App: "a", Version: "1", Name: strings.Repeat("n", 129)},
	}
	for _, k := range bad {
		if _, err := s.Begin(ctx, k); !errors.Is(err, ErrInvalidKey) || errdefs.KindOf(err) != errdefs.KindInvalidArgument {
			t.Errorf("Begin(%q) = %v, want ErrInvalidKey", k.Path(), err)
		}
		if _, err := s.Stat(ctx, k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Stat(%q) = %v, want ErrInvalidKey", k.Path(), err)
		}
		if _, err := s.Open(ctx, k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Open(%q) = %v, want ErrInvalidKey", k.Path(), err)
		}
		if _, err := FormatURI(k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("FormatURI(%q) = %v", k.Path(), err)
		}
	}
	for _, id := range []string{"../../refs", "..", "", "x/../y", strings.ToUpper("5b0c7d1e-8f2a-4c3b-9d4e-0a1b2c3d4e5f")} {
		if _, err := s.Append(ctx, id, 0, strings.NewReader("x")); !errors.Is(err, ErrNotFound) {
			t.Errorf("Append(upload %q) = %v", id, err)
		}
		if _, err := s.Commit(ctx, id, digestOf(nil)); !errors.Is(err, ErrNotFound) {
			t.Errorf("Commit(upload %q) = %v", id, err)
		}
		if err := s.Abort(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Abort(upload %q) = %v", id, err)
		}
	}
	for _, u := range []string{
		"artifact_store://projects/p/artifacts/a/1/../n",
		"artifact_store://projects/p/artifacts/a/1/n/",
		"artifact_store://projects/p/artifacts/a/1/n/extra",
		"artifact_store:///projects/p/artifacts/a/1/n",
		"artifact_store://projects/p/artifacts/a/1/n?x=1",
		"artifact_store://projects/p/artifacts/a/1/n#frag",
		"artifact_store://projects/p/artifacts/a/1/%2e%2e",
		"artifact_store://projects//artifacts/a/1/n",
		"artifact_store://projects/p/models/a/1/n",
		"ARTIFACT_STORE://projects/p/artifacts/a/1/n",
		"s3://projects/p/artifacts/a/1/n",
		"/projects/p/artifacts/a/1/n",
		"",
	} {
		if _, err := ParseURI(u); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ParseURI(%q) = %v", u, err)
		}
	}
	if files := listFiles(t, root); len(files) != 0 {
		t.Fatalf("files created: %v", files)
	}
}

func TestURIRoundTrip(t *testing.T) {
	t.Parallel()
	u, err := FormatURI(testKey)
	if err != nil {
		t.Fatal(err)
	}
	if want := "artifact_store://projects/5b0c7d1e-8f2a-4c3b-9d4e-0a1b2c3d4e5f/artifacts/llm-server/1.2.0-rc.1/weights"; u != want {
		t.Fatalf("uri = %s", u)
	}
	k, err := ParseURI(u)
	if err != nil || k != testKey {
		t.Fatalf("parse = %+v %v", k, err)
	}
	k, err = ParsePath(testKey.Path())
	if err != nil || k != testKey {
		t.Fatalf("parse path = %+v %v", k, err)
	}
}

func FuzzParseURI(f *testing.F) {
	f.Add("artifact_store://projects/5b0c7d1e-8f2a-4c3b-9d4e-0a1b2c3d4e5f/artifacts/llm-server/1.2.0-rc.1+build.5/weights")
	f.Add("artifact_store://projects/p/artifacts/a/1/model.safetensors")
	f.Add("artifact_store://projects/p/artifacts/a/1/../../x")
	f.Add("artifact_store://projects/p/artifacts/a/1/n/")
	f.Add("artifact_store://projects/%2e%2e/artifacts/a/1/n")
	f.Add("artifact_store://projects/p/artifacts/a/1/n\x00")
	f.Fuzz(func(t *testing.T, uri string) {
		k, err := ParseURI(uri)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("error %v does not match ErrInvalidKey", err)
			}
			return
		}
		// Canonical: formatting gives back exactly the input.
		back, err := FormatURI(k)
		if err != nil || back != uri {
			t.Fatalf("FormatURI(ParseURI(%q)) = %q, %v", uri, back, err)
		}
		// Safe as a path: local, clean, exactly six elements.
		p := k.Path()
		if !filepath.IsLocal(p) || filepath.Clean(p) != filepath.FromSlash(p) || strings.Count(p, "/") != 5 {
			t.Fatalf("unsafe path %q from %q", p, uri)
		}
		for _, seg := range strings.Split(p, "/") {
			if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, ".") {
				t.Fatalf("bad segment %q in %q", seg, p)
			}
		}
	})
}

// generator yields size deterministic pseudo-random bytes, produced on demand.
func generator(size int64, seed byte) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{seed}), size)
}

func TestLargeUploadStreamsInBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB streaming test skipped with -short")
	}
	const (
		size    = int64(1 << 30)
		heapCap = 64 << 20
	)
	s, _ := newStore(t, Options{})
	ctx := t.Context()

	runtime.GC()
	var peak atomic.Uint64
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		h := max(ms.HeapInuse, ms.HeapAlloc)
		for {
			old := peak.Load()
			if h <= old || peak.CompareAndSwap(old, h) {
				return
			}
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				sample()
			}
		}
	}()

	start := time.Now()
	id, err := s.Begin(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	// The client hashes what it sends, as a real uploader does, in the same stream.
	clientHash := sha256.New()
	half := size / 2
	n, err := s.Append(ctx, id, 0, io.TeeReader(generator(half, 7), clientHash))
	if err != nil || n != half {
		t.Fatalf("append 1 = %d %v", n, err)
	}
	rest := io.TeeReader(generator(size-half, 8), clientHash)
	n, err = s.Append(ctx, id, half, rest)
	if err != nil || n != size {
		t.Fatalf("append 2 = %d %v", n, err)
	}
	digest := "sha256:" + hex.EncodeToString(clientHash.Sum(nil))
	obj, err := s.Commit(ctx, id, digest)
	if err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-done
	sample()
	elapsed := time.Since(start)
	if obj.Size != size || obj.Digest != digest {
		t.Fatalf("object = %+v", obj)
	}
	t.Logf("streamed %d MiB in %s (%.0f MiB/s); peak Go heap %.1f MiB (cap %d MiB)",
		size>>20, elapsed.Round(time.Millisecond), float64(size>>20)/elapsed.Seconds(), float64(peak.Load())/(1<<20), heapCap>>20)
	if p := peak.Load(); p >= heapCap {
		t.Fatalf("peak heap %d bytes exceeds %d", p, heapCap)
	}
}

// A purge that read an upload's old checkpoint while an Append held its lock
// must look again once it has the lock: the Append has made it live.
func TestPurgeSparesAnUploadAppendedMeanwhile(t *testing.T) {
	now := time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, _ := newStore(t, Options{Clock: clock})
	ctx := t.Context()
	id, err := s.Begin(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	pr, pw := io.Pipe()
	appended := make(chan error, 1)
	go func() { _, err := s.Append(ctx, id, 0, pr); appended <- err }()
	time.Sleep(20 * time.Millisecond) // Append holds the upload's lock, reading
	purged := make(chan int, 1)
	go func() { n, _ := s.PurgeUploads(ctx, time.Hour); purged <- n }()
	time.Sleep(20 * time.Millisecond) // purge has read the stale state, waits for the lock
	if _, err := pw.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close()
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	if n := <-purged; n != 0 {
		t.Errorf("purged %d uploads, want 0", n)
	}
	if _, err := s.Status(ctx, id); errors.Is(err, ErrNotFound) {
		t.Fatal("an upload appended to just now was purged")
	}
}

// RemoveObject removes a key's reference and the shared bytes only where
// keep allows, and never a key that holds other content.
func TestRemoveObjectKeepsWhatIsHeld(t *testing.T) {
	t.Parallel()
	s, root := newStore(t, Options{})
	ctx := t.Context()
	put := func(k Key, content string) {
		id, err := s.Begin(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, id, 0, strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(ctx, id, digestOf([]byte(content))); err != nil {
			t.Fatal(err)
		}
	}
	other, shared := testKey, testKey
	other.Name, shared.Name = "other", "shared"
	put(testKey, "v1")
	put(shared, "v1")
	put(other, "v2")
	blobs := func() int {
		n := 0
		for _, f := range listFiles(t, root) {
			if strings.HasPrefix(f, "blobs/") {
				n++
			}
		}
		return n
	}
	keep := func(k Keep) func(context.Context) (Keep, error) {
		return func(context.Context) (Keep, error) { return k, nil }
	}
	d := digestOf([]byte("v1"))
	// A key holding other content is left alone.
	if removed, err := s.RemoveObject(ctx, other, d, keep(Keep{Blob: true})); err != nil || removed {
		t.Fatalf("remove of a key with other content: %v %v", removed, err)
	}
	if _, err := s.Stat(ctx, other); err != nil {
		t.Fatal(err)
	}
	// A held reference stays.
	if removed, err := s.RemoveObject(ctx, testKey, d, keep(Keep{Ref: true, Blob: true})); err != nil || removed {
		t.Fatalf("remove of a held reference: %v %v", removed, err)
	}
	// The bytes stay while another key uses them.
	if removed, err := s.RemoveObject(ctx, testKey, d, keep(Keep{Blob: true})); err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	if _, err := s.Stat(ctx, testKey); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removed key: %v", err)
	}
	rc, err := s.Open(ctx, shared)
	if err != nil {
		t.Fatalf("the other key of the same content: %v", err)
	}
	rc.Close()
	if n := blobs(); n != 2 {
		t.Fatalf("blobs = %d, want 2", n)
	}
	if removed, err := s.RemoveObject(ctx, shared, d, keep(Keep{})); err != nil || !removed {
		t.Fatalf("remove the last: %v %v", removed, err)
	}
	if n := blobs(); n != 1 {
		t.Fatalf("blobs after removing the last use = %d, want 1", n)
	}
}
