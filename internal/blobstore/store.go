// Package blobstore is content-addressed, filesystem-backed project blob
// storage for non-OCI artifacts (model weights, bundles), addressed by
// artifact_store://projects/<project_id>/artifacts/<app>/<version>/<name>.
//
// Uploads are streamed and resumable: Begin, then Append at the current
// offset (Status tells a client where to resume), then Commit with the
// expected digest. The sha256 state is checkpointed next to the partial data,
// so an upload resumes after a process restart without re-reading what it has.
// Nothing is ever held in memory beyond one copy buffer.
//
// On-disk layout under the root:
//
//	blobs/sha256/<hex[:2]>/<hex>                           committed bytes, by digest (shared by keys)
//	refs/projects/<p>/artifacts/<app>/<version>/<name>     JSON {digest, size, committed_at}; write-once
//	uploads/<upload-id>/{info.json,data,state.json}        in-progress uploads
//
// Keys are write-once (digest is truth): committing the same content again
// is idempotent, other content for a committed key is ErrAlreadyExists.
// An upload is meant to be driven by one process at a time: appends to one
// upload are serialised within a process, not across processes.
package blobstore

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// Object is a committed blob.
type Object struct {
	Key         Key
	Digest      string // sha256:<hex>
	Size        int64
	CommittedAt time.Time
}

// Upload is the state of an in-progress upload.
type Upload struct {
	ID        string
	Key       Key
	Offset    int64 // bytes received and checkpointed: the next Append's offset
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Options tune a Store. The zero value is usable.
type Options struct {
	Clock           func() time.Time // default time.Now
	Logger          *slog.Logger     // default discards
	MaxObjectSize   int64            // bytes; 0 means no limit
	CheckpointBytes int64            // sync data and persist the hash state at least this often; default 32 MiB
}

const (
	defaultCheckpoint = 32 << 20
	copyBufferSize    = 1 << 20
	lockStripes       = 64
	dirPerm           = 0o700 // blobs are tenants' data: owner only
	filePerm          = 0o600
)

// Store is a blob store rooted at a directory. It is safe for concurrent use.
type Store struct {
	root       string
	now        func() time.Time
	log        *slog.Logger
	maxSize    int64
	checkpoint int64
	locks      [lockStripes]sync.Mutex // per-upload serialisation, striped by upload id
	// contentLocks serialise, per digest (striped), a commit's store-and-
	// reference against RemoveObject's check-and-delete, so a blob is never
	// deleted between a commit finding it present and referencing it.
	contentLocks [lockStripes]sync.Mutex
}

// New opens (creating if needed) a store under root.
func New(root string, opts Options) (*Store, error) {
	if root == "" {
		return nil, fail(ErrInvalidArgument, "empty root")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("blobstore: root %q: %w", root, err)
	}
	for _, dir := range []string{"blobs/sha256", "refs", "uploads"} {
		if err := os.MkdirAll(filepath.Join(abs, filepath.FromSlash(dir)), dirPerm); err != nil {
			return nil, fmt.Errorf("blobstore: create %s: %w", dir, err)
		}
	}
	s := &Store{
		root:       abs,
		now:        opts.Clock,
		log:        opts.Logger,
		maxSize:    opts.MaxObjectSize,
		checkpoint: opts.CheckpointBytes,
	}
	s.now = clock.Or(s.now)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.checkpoint <= 0 {
		s.checkpoint = defaultCheckpoint
	}
	return s, nil
}

// Begin starts an upload for key and returns its id.
func (s *Store) Begin(ctx context.Context, key Key) (string, error) {
	if err := key.Validate(); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	id := uuid.NewString()
	// Build the upload directory aside and rename it in, so a crash never
	// leaves a half-made upload under its id.
	tmp, err := os.MkdirTemp(filepath.Join(s.root, "uploads"), ".begin-")
	if err != nil {
		return "", fmt.Errorf("blobstore: begin: %w", err)
	}
	defer os.RemoveAll(tmp) // no-op after the rename
	now := s.now().UTC()
	info := uploadInfo{Key: key.Path(), CreatedAt: now}
	if err := writeJSONFile(filepath.Join(tmp, "info.json"), info); err != nil {
		return "", fmt.Errorf("blobstore: begin: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(tmp, "data"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, filePerm)
	if err != nil {
		return "", fmt.Errorf("blobstore: begin: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("blobstore: begin: %w", err)
	}
	st, err := marshalState(sha256.New(), 0, now)
	if err != nil {
		return "", err
	}
	if err := writeJSONFile(filepath.Join(tmp, "state.json"), st); err != nil {
		return "", fmt.Errorf("blobstore: begin: %w", err)
	}
	if err := os.Rename(tmp, s.uploadDir(id)); err != nil {
		return "", fmt.Errorf("blobstore: begin: %w", err)
	}
	s.log.DebugContext(ctx, "blob upload started", "upload_id", id, "key", key.Path())
	return id, nil
}

// Status reports an upload's checkpointed offset: where the client resumes.
func (s *Store) Status(ctx context.Context, uploadID string) (Upload, error) {
	unlock, err := s.lockUpload(uploadID)
	if err != nil {
		return Upload{}, err
	}
	defer unlock()
	u, err := s.openUpload(ctx, uploadID)
	if err != nil {
		return Upload{}, err
	}
	defer u.data.Close()
	return u.status(), nil
}

// Append streams r into the upload at offset, which must equal the upload's
// current size (else a Conflict whose cause is an *OffsetError and whose
// details carry "offset", the size to resume at). It returns
// the new size. When r fails or ctx ends midway, the bytes received so far are
// kept and checkpointed, and the new size is returned with the error.
func (s *Store) Append(ctx context.Context, uploadID string, offset int64, r io.Reader) (int64, error) {
	unlock, err := s.lockUpload(uploadID)
	if err != nil {
		return 0, err
	}
	defer unlock()
	u, err := s.openUpload(ctx, uploadID)
	if err != nil {
		return 0, err
	}
	defer u.data.Close()
	if offset != u.offset {
		oe := &OffsetError{Offset: offset, Current: u.offset}
		return u.offset, &errdefs.Error{
			Kind: errdefs.KindConflict, Code: codes[ErrOffsetMismatch], Message: oe.message(),
			Details: map[string]any{"offset": u.offset}, Cause: oe,
		}
	}
	if _, err := u.data.Seek(u.offset, io.SeekStart); err != nil {
		return u.offset, fmt.Errorf("blobstore: append %s: %w", uploadID, err)
	}
	buf := make([]byte, copyBufferSize)
	var unsynced int64
	for {
		if err := ctx.Err(); err != nil {
			return s.stopAppend(u, err)
		}
		n, rerr := r.Read(buf)
		if n > 0 {
			if s.maxSize > 0 && u.offset+int64(n) > s.maxSize {
				return s.stopAppend(u, fail(ErrTooLarge, "more than %d bytes", s.maxSize))
			}
			if _, werr := u.data.Write(buf[:n]); werr != nil {
				// Drop a partial write so data and hash state agree.
				if terr := u.data.Truncate(u.offset); terr != nil {
					return u.offset, fmt.Errorf("blobstore: append %s: %w (and truncate: %v)", uploadID, werr, terr)
				}
				return s.stopAppend(u, werr)
			}
			u.hash.Write(buf[:n])
			u.offset += int64(n)
			unsynced += int64(n)
			if unsynced >= s.checkpoint {
				if err := s.checkpointUpload(u); err != nil {
					return u.offset, err
				}
				unsynced = 0
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return s.stopAppend(u, fmt.Errorf("read: %w", rerr))
		}
	}
	if err := s.checkpointUpload(u); err != nil {
		return u.offset, err
	}
	return u.offset, nil
}

// stopAppend checkpoints what was received and returns it with cause.
func (s *Store) stopAppend(u *openUpload, cause error) (int64, error) {
	if err := s.checkpointUpload(u); err != nil {
		return u.offset, errors.Join(fmt.Errorf("blobstore: append %s: %w", u.id, cause), err)
	}
	return u.offset, fmt.Errorf("blobstore: append %s: %w", u.id, cause)
}

// Commit finishes an upload: the digest of everything appended (from the
// checkpointed hash state, never re-buffered) must equal expectedDigest
// ("sha256:<hex>"). On a mismatch the upload is deleted and ErrDigestMismatch
// returned. Otherwise the bytes are renamed into the content-addressed blob
// area and the key's reference is created atomically.
func (s *Store) Commit(ctx context.Context, uploadID, expectedDigest string) (Object, error) {
	if !ValidDigest(expectedDigest) {
		return Object{}, fail(ErrInvalidArgument, "digest %q is not sha256:<64 lowercase hex>", expectedDigest)
	}
	unlock, err := s.lockUpload(uploadID)
	if err != nil {
		return Object{}, err
	}
	defer unlock()
	u, err := s.openUpload(ctx, uploadID)
	if err != nil {
		return Object{}, err
	}
	dataPath := u.data.Name()
	if err := u.data.Sync(); err != nil {
		u.data.Close()
		return Object{}, fmt.Errorf("blobstore: commit %s: %w", uploadID, err)
	}
	if err := u.data.Close(); err != nil {
		return Object{}, fmt.Errorf("blobstore: commit %s: %w", uploadID, err)
	}
	digest := "sha256:" + hex.EncodeToString(u.hash.Sum(nil))
	if digest != expectedDigest {
		if err := os.RemoveAll(s.uploadDir(uploadID)); err != nil {
			return Object{}, fmt.Errorf("blobstore: commit %s: remove after digest mismatch: %w", uploadID, err)
		}
		return Object{}, fail(ErrDigestMismatch, "upload %s has %s, expected %s", uploadID, digest, expectedDigest)
	}
	if err := ctx.Err(); err != nil {
		return Object{}, err
	}
	// Past this point the upload is consumed whatever happens.
	defer func() {
		if err := os.RemoveAll(s.uploadDir(uploadID)); err != nil {
			s.log.WarnContext(ctx, "blob upload cleanup failed", "upload_id", uploadID, "error", err)
		}
	}()
	unlockContent := s.lockContent(digest)
	defer unlockContent()
	if existing, err := s.Stat(ctx, u.key); err == nil {
		if existing.Digest != digest {
			return Object{}, fail(ErrAlreadyExists, "%s holds %s", u.key, existing.Digest)
		}
		return existing, nil // the same content again: idempotent
	} else if !errors.Is(err, ErrNotFound) {
		return Object{}, err
	}
	if err := s.storeBlob(dataPath, digest); err != nil {
		return Object{}, err
	}
	obj, err := s.createRef(ctx, Object{Key: u.key, Digest: digest, Size: u.offset, CommittedAt: s.now().UTC()})
	if err != nil {
		return Object{}, err
	}
	s.log.InfoContext(ctx, "blob committed", "key", obj.Key.Path(), "digest", obj.Digest, "size", obj.Size)
	return obj, nil
}

// Abort deletes an upload and its data.
func (s *Store) Abort(ctx context.Context, uploadID string) error {
	unlock, err := s.lockUpload(uploadID)
	if err != nil {
		return err
	}
	defer unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := s.uploadDir(uploadID)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fail(ErrNotFound, "upload %s not found", uploadID)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("blobstore: abort %s: %w", uploadID, err)
	}
	return nil
}

// PurgeUploads deletes uploads whose last checkpoint (by the store's clock)
// is older than olderThan, and returns how many it removed. Run it from a
// periodic worker.
func (s *Store) PurgeUploads(ctx context.Context, olderThan time.Duration) (int, error) {
	entries, err := os.ReadDir(filepath.Join(s.root, "uploads"))
	if err != nil {
		return 0, fmt.Errorf("blobstore: purge: %w", err)
	}
	cutoff := s.now().Add(-olderThan)
	removed := 0
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		if !s.idleSince(e, cutoff) {
			continue
		}
		ok, err := s.removeUploadIfIdle(e, cutoff)
		if err != nil {
			return removed, err
		}
		if ok {
			removed++
		}
	}
	return removed, nil
}

// idleSince reports whether the upload's last checkpoint is not after cutoff.
func (s *Store) idleSince(e fs.DirEntry, cutoff time.Time) bool {
	var st uploadState
	if err := readJSONFile(filepath.Join(s.root, "uploads", e.Name(), "state.json"), &st); err == nil {
		return !st.UpdatedAt.After(cutoff)
	}
	fi, err := e.Info()
	// Half-made (".begin-*") or damaged: judge by the directory.
	return err == nil && !fi.ModTime().After(cutoff)
}

// removeUploadIfIdle looks again under the upload's lock: an Append that held
// it while the purge looked may have checkpointed since, and its upload is
// live again.
func (s *Store) removeUploadIfIdle(e fs.DirEntry, cutoff time.Time) (bool, error) {
	name := e.Name()
	if id, err := uuid.Parse(name); err == nil && id.String() == name {
		unlock, err := s.lockUpload(name)
		if err != nil {
			return false, err
		}
		defer unlock()
		if !s.idleSince(e, cutoff) {
			return false, nil
		}
	}
	if err := os.RemoveAll(filepath.Join(s.root, "uploads", name)); err != nil {
		return false, fmt.Errorf("blobstore: purge %s: %w", name, err)
	}
	return true, nil
}

// Keep is what RemoveObject must leave in place.
type Keep struct {
	Ref  bool // the key's reference: something still names this content at this key
	Blob bool // the bytes: blobs are shared by every key, of any project, with the same content
}

// RemoveObject deletes the committed object at key when it still holds
// digest (a key holding other content is left alone), and the bytes of
// digest, each unless keep says something still needs it. keep is asked
// under the digest's lock, which a commit of the same digest holds from
// finding the content present until it references it: within a process a
// commit and a removal never interleave. It reports whether the reference
// was removed.
func (s *Store) RemoveObject(ctx context.Context, key Key, digest string, keep func(context.Context) (Keep, error)) (bool, error) {
	if !ValidDigest(digest) {
		return false, fail(ErrInvalidArgument, "digest %q is not sha256:<64 lowercase hex>", digest)
	}
	unlock := s.lockContent(digest)
	defer unlock()
	k, err := keep(ctx)
	if err != nil {
		return false, err
	}
	removed := false
	if !k.Ref {
		obj, err := s.Stat(ctx, key)
		switch {
		case err == nil && obj.Digest == digest:
			if err := os.Remove(s.refPath(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return false, fmt.Errorf("blobstore: remove %s: %w", key, err)
			}
			removed = true
		case err != nil && !errors.Is(err, ErrNotFound):
			return false, err
		}
	}
	if k.Blob {
		return removed, nil
	}
	if err := os.Remove(s.blobPath(digest)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return removed, fmt.Errorf("blobstore: remove %s: %w", digest, err)
	}
	return removed, nil
}

// Stat returns the committed object at key, or an error matching ErrNotFound.
func (s *Store) Stat(ctx context.Context, key Key) (Object, error) {
	if err := key.Validate(); err != nil {
		return Object{}, err
	}
	if err := ctx.Err(); err != nil {
		return Object{}, err
	}
	b, err := os.ReadFile(s.refPath(key))
	if errors.Is(err, fs.ErrNotExist) {
		return Object{}, fail(ErrNotFound, "no object at %s", key)
	}
	if err != nil {
		return Object{}, fmt.Errorf("blobstore: stat %s: %w", key, err)
	}
	var r refRecord
	if err := json.Unmarshal(b, &r); err != nil || !ValidDigest(r.Digest) {
		return Object{}, fmt.Errorf("blobstore: stat %s: damaged reference", key)
	}
	return Object{Key: key, Digest: r.Digest, Size: r.Size, CommittedAt: r.CommittedAt}, nil
}

// Open streams the committed object at key. The caller closes it.
func (s *Store) Open(ctx context.Context, key Key) (io.ReadCloser, error) {
	obj, err := s.Stat(ctx, key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(s.blobPath(obj.Digest))
	if err != nil {
		return nil, fmt.Errorf("blobstore: open %s (%s): %w", key, obj.Digest, err)
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() != obj.Size {
		f.Close()
		return nil, fmt.Errorf("blobstore: open %s: blob %s is damaged", key, obj.Digest)
	}
	return f, nil
}

// --- internals ---

type uploadInfo struct {
	Key       string    `json:"key"`
	CreatedAt time.Time `json:"created_at"`
}

// uploadState is the checkpoint: how many bytes of data are covered by the
// marshalled sha256 state.
type uploadState struct {
	Offset    int64     `json:"offset"`
	SHA256    []byte    `json:"sha256_state"`
	UpdatedAt time.Time `json:"updated_at"`
}

type refRecord struct {
	Digest      string    `json:"digest"`
	Size        int64     `json:"size"`
	CommittedAt time.Time `json:"committed_at"`
}

type openUpload struct {
	id        string
	key       Key
	createdAt time.Time
	updatedAt time.Time
	offset    int64
	hash      hash.Hash
	data      *os.File
}

func (u *openUpload) status() Upload {
	return Upload{ID: u.id, Key: u.key, Offset: u.offset, CreatedAt: u.createdAt, UpdatedAt: u.updatedAt}
}

// lockUpload validates the id (it becomes a path element) and takes its stripe lock.
func (s *Store) lockUpload(uploadID string) (func(), error) {
	id, err := uuid.Parse(uploadID)
	if err != nil || id.String() != uploadID {
		return nil, fail(ErrNotFound, "upload %q not found", uploadID)
	}
	h := fnv.New32a()
	h.Write([]byte(uploadID))
	mu := &s.locks[h.Sum32()%lockStripes]
	mu.Lock()
	return mu.Unlock, nil
}

// lockContent takes the stripe lock of a digest.
func (s *Store) lockContent(digest string) func() {
	h := fnv.New32a()
	h.Write([]byte(digest))
	mu := &s.contentLocks[h.Sum32()%lockStripes]
	mu.Lock()
	return mu.Unlock
}

// openUpload loads an upload's checkpoint and opens its data, cutting off
// bytes written after the last checkpoint (a crash mid-append): the
// checkpoint's offset is the truth clients resume from.
func (s *Store) openUpload(ctx context.Context, id string) (*openUpload, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir := s.uploadDir(id)
	var info uploadInfo
	if err := readJSONFile(filepath.Join(dir, "info.json"), &info); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fail(ErrNotFound, "upload %s not found", id)
		}
		return nil, fmt.Errorf("blobstore: upload %s: %w", id, err)
	}
	key, err := ParsePath(info.Key)
	if err != nil {
		return nil, fmt.Errorf("blobstore: upload %s: %w", id, err)
	}
	var st uploadState
	if err := readJSONFile(filepath.Join(dir, "state.json"), &st); err != nil {
		return nil, fmt.Errorf("blobstore: upload %s: %w", id, err)
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(st.SHA256); err != nil {
		return nil, fmt.Errorf("blobstore: upload %s: hash state: %w", id, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "data"), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("blobstore: upload %s: %w", id, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("blobstore: upload %s: %w", id, err)
	}
	switch {
	case fi.Size() < st.Offset:
		f.Close()
		return nil, fmt.Errorf("blobstore: upload %s: data (%d bytes) is shorter than its checkpoint (%d)", id, fi.Size(), st.Offset)
	case fi.Size() > st.Offset:
		if err := f.Truncate(st.Offset); err != nil {
			f.Close()
			return nil, fmt.Errorf("blobstore: upload %s: %w", id, err)
		}
	}
	return &openUpload{id: id, key: key, createdAt: info.CreatedAt, updatedAt: st.UpdatedAt, offset: st.Offset, hash: h, data: f}, nil
}

// checkpointUpload makes the data durable, then records the hash state that covers it.
func (s *Store) checkpointUpload(u *openUpload) error {
	if err := u.data.Sync(); err != nil {
		return fmt.Errorf("blobstore: checkpoint %s: %w", u.id, err)
	}
	u.updatedAt = s.now().UTC()
	st, err := marshalState(u.hash, u.offset, u.updatedAt)
	if err != nil {
		return err
	}
	if err := writeJSONFile(filepath.Join(s.uploadDir(u.id), "state.json"), st); err != nil {
		return fmt.Errorf("blobstore: checkpoint %s: %w", u.id, err)
	}
	return nil
}

func marshalState(h hash.Hash, offset int64, at time.Time) (uploadState, error) {
	b, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return uploadState{}, fmt.Errorf("blobstore: marshal hash state: %w", err)
	}
	return uploadState{Offset: offset, SHA256: b, UpdatedAt: at}, nil
}

// storeBlob moves committed data into blobs/ by digest; identical content
// already there is kept and the new copy dropped.
func (s *Store) storeBlob(dataPath, digest string) error {
	dst := s.blobPath(digest)
	if err := os.MkdirAll(filepath.Dir(dst), dirPerm); err != nil {
		return fmt.Errorf("blobstore: store %s: %w", digest, err)
	}
	if _, err := os.Stat(dst); err == nil {
		return os.Remove(dataPath)
	}
	if err := os.Rename(dataPath, dst); err != nil {
		return fmt.Errorf("blobstore: store %s: %w", digest, err)
	}
	return syncDir(filepath.Dir(dst))
}

// createRef creates key's reference exactly once (hard link of a complete
// temp file: atomic create-if-absent, also across processes). An existing
// reference with the same digest is returned as is.
func (s *Store) createRef(ctx context.Context, obj Object) (Object, error) {
	final := s.refPath(obj.Key)
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return Object{}, fmt.Errorf("blobstore: commit %s: %w", obj.Key, err)
	}
	// Key names never start with '.', so temp names cannot collide with keys.
	tmp, err := os.CreateTemp(dir, ".ref-*")
	if err != nil {
		return Object{}, fmt.Errorf("blobstore: commit %s: %w", obj.Key, err)
	}
	defer os.Remove(tmp.Name())
	rec := refRecord{Digest: obj.Digest, Size: obj.Size, CommittedAt: obj.CommittedAt}
	if err := writeAndSync(tmp, rec); err != nil {
		return Object{}, fmt.Errorf("blobstore: commit %s: %w", obj.Key, err)
	}
	if err := os.Link(tmp.Name(), final); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return Object{}, fmt.Errorf("blobstore: commit %s: %w", obj.Key, err)
		}
		existing, serr := s.Stat(ctx, obj.Key)
		if serr != nil {
			return Object{}, serr
		}
		if existing.Digest != obj.Digest {
			return Object{}, fail(ErrAlreadyExists, "%s holds %s", obj.Key, existing.Digest)
		}
		return existing, nil
	}
	if err := syncDir(dir); err != nil {
		return Object{}, err
	}
	return obj, nil
}

func (s *Store) uploadDir(id string) string { return filepath.Join(s.root, "uploads", id) }

func (s *Store) refPath(k Key) string {
	return filepath.Join(s.root, "refs", filepath.FromSlash(k.Path()))
}

func (s *Store) blobPath(digest string) string {
	hexPart := strings.TrimPrefix(digest, "sha256:")
	return filepath.Join(s.root, "blobs", "sha256", hexPart[:2], hexPart)
}

// ValidDigest reports whether d is "sha256:" and 64 lowercase hex digits,
// the only digest form the platform accepts.
func ValidDigest(d string) bool {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	return ok && len(hexPart) == 64 && strings.Trim(hexPart, "0123456789abcdef") == ""
}

// writeJSONFile replaces path atomically (temp file, fsync, rename).
func writeJSONFile(path string, v any) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := writeAndSync(tmp, v); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// writeAndSync writes v as JSON to f, syncs and closes it.
func writeAndSync(f *os.File, v any) error {
	if err := json.NewEncoder(f).Encode(v); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(filePerm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("blobstore: sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("blobstore: sync %s: %w", dir, err)
	}
	return nil
}
