package blobstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// PutContent streams r into the content-addressed blobs, with no project
// key: platform-level content (the platform's own releases) whose
// references live in the database. It returns the sha256 digest and size;
// content larger than maxBytes (0: the store's limit) is ErrTooLarge and
// leaves nothing behind, and so does content whose digest is not expected
// (when set): ErrDigestMismatch. Identical content is stored once.
func (s *Store) PutContent(ctx context.Context, r io.Reader, maxBytes int64, expected string) (string, int64, error) {
	if maxBytes <= 0 {
		maxBytes = s.maxSize
	}
	dir := filepath.Join(s.root, "blobs")
	// Temp names start with '.', which no digest directory does.
	tmp, err := os.CreateTemp(dir, ".put-*")
	if err != nil {
		return "", 0, fmt.Errorf("blobstore: put: %w", err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	src := r
	if maxBytes > 0 {
		src = io.LimitReader(r, maxBytes+1)
	}
	buf := make([]byte, copyBufferSize)
	n, err := io.CopyBuffer(io.MultiWriter(tmp, h), readerCtx{ctx, src}, buf)
	if err != nil {
		return "", 0, fmt.Errorf("blobstore: put: %w", err)
	}
	if maxBytes > 0 && n > maxBytes {
		return "", 0, fail(ErrTooLarge, "content is larger than %d bytes", maxBytes)
	}
	if err := tmp.Sync(); err != nil {
		return "", 0, fmt.Errorf("blobstore: put: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", 0, fmt.Errorf("blobstore: put: %w", err)
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if expected != "" && expected != digest {
		return "", 0, fail(ErrDigestMismatch, "the content has digest %s, not the expected %s", digest, expected)
	}
	unlock := s.lockContent(digest)
	err = s.storeBlob(tmp.Name(), digest)
	unlock()
	if err != nil {
		return "", 0, err
	}
	done = true
	return digest, n, nil
}

// OpenContent opens the content with digest for reading and seeking (range
// requests); the caller closes it.
func (s *Store) OpenContent(ctx context.Context, digest string) (io.ReadSeekCloser, int64, error) {
	if !ValidDigest(digest) {
		return nil, 0, fail(ErrInvalidArgument, "digest %q is not sha256:<64 hex>", digest)
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	f, err := os.Open(s.blobPath(digest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fail(ErrNotFound, "no content %s", digest)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("blobstore: open %s: %w", digest, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("blobstore: open %s: %w", digest, err)
	}
	return f, fi.Size(), nil
}

// readerCtx stops a copy when ctx ends.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
