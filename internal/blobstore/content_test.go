package blobstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/blobstore"
)

// Platform content: streamed in with its digest computed, stored once by
// digest, read back seekable; over the limit it is refused and leaves
// nothing behind.
func TestPutContent(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := blobstore.New(root, blobstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("release bytes ", 100)
	sum := sha256.Sum256([]byte(body))
	want := "sha256:" + hex.EncodeToString(sum[:])
	for range 2 {
		d, n, err := s.PutContent(ctx, strings.NewReader(body), 0, want)
		if err != nil || d != want || n != int64(len(body)) {
			t.Fatalf("put: %s %d %v", d, n, err)
		}
	}
	rc, size, err := s.OpenContent(ctx, want)
	if err != nil || size != int64(len(body)) {
		t.Fatalf("open: %d %v", size, err)
	}
	if _, err := rc.Seek(8, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != body[8:] {
		t.Fatalf("read back %q", b)
	}
	if _, _, err := s.PutContent(ctx, strings.NewReader(body), 10, ""); !errors.Is(err, blobstore.ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, _, err := s.PutContent(ctx, strings.NewReader("other"), 0, want); !errors.Is(err, blobstore.ErrDigestMismatch) {
		t.Fatalf("unexpected digest: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(root, "blobs", ".put-*"))
	if len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
	if _, _, err := s.OpenContent(ctx, "sha256:"+strings.Repeat("0", 64)); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, _, err := s.OpenContent(ctx, "../etc/passwd"); !errors.Is(err, blobstore.ErrInvalidArgument) {
		t.Fatalf("bad digest: %v", err)
	}
}
