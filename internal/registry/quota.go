package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"

	"github.com/distribution/distribution/v3"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/google/uuid"
	"github.com/opencontainers/go-digest"

	"github.com/gpuaas/gpuaas/internal/quotastream"
)

// UploadQuota is an optional extension of Authorizer: what a project may
// write into the embedded registry. Every byte a push sends is held
// against the quota before the registry stores it, so neither one pusher
// streaming a large chunked upload nor several pushing at once can store
// more than the quota: a hold that does not fit is refused and the
// upload's data is removed. Refusals are *Refusal errors; any other error
// is a failure (500). What a deleted manifest alone referenced is given
// back by whoever records the delete (ManifestDeleter).
type UploadQuota interface {
	// HoldUpload adds between need and want bytes (as many as fit) to the
	// hold of upload, an upload session of repository, and returns how
	// many it added.
	HoldUpload(ctx context.Context, repository, upload string, need, want int64) (int64, error)
	// HoldBlobs holds, as hold, the whole size of each of blobs about to
	// enter repository or be referenced there (a manifest and what it
	// references, a mounted blob) that the repository's project does not
	// hold already; one it holds is marked as used now.
	HoldBlobs(ctx context.Context, repository, hold string, blobs []BlobRef) error
	// UseCommitted returns the size of blob digest when the project of
	// repository holds it already (ok false otherwise) and, in the same
	// step, marks it as used now, so that no recount gives it back while
	// a write that streams it for free is in flight.
	UseCommitted(ctx context.Context, repository, digest string) (size int64, ok bool, err error)
	// ShrinkHold gives back n bytes of hold that were held ahead of data
	// that never came.
	ShrinkHold(ctx context.Context, hold string, n int64) error
	// CommitBlobs records that hold became blobs in repository (an
	// upload's one blob, or what a HoldBlobs held) and drops the hold: a
	// digest its project holds already costs nothing more.
	CommitBlobs(ctx context.Context, repository, hold string, blobs []BlobRef) error
	// DropHold forgets hold (its upload was cancelled or removed).
	DropHold(ctx context.Context, hold string) error
	// TouchHold marks hold, if there is one, as written to now: a request
	// that continues its upload is live, whether or not bytes follow.
	TouchHold(ctx context.Context, hold string) error
}

// BlobRef is a blob by digest and stored size.
type BlobRef struct {
	Digest string
	Size   int64
}

// Refusal is an UploadQuota's answer to a write that does not fit: the
// registry answers it in the distribution API's error format, so docker
// and crane print Message.
type Refusal struct {
	Status  int    // 403 (DENIED) or 400 (SIZE_INVALID)
	Code    string // DENIED | SIZE_INVALID
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// uploadPathRe splits /v2/<name>/blobs/uploads/<id>; uploadsPathRe matches
// /v2/<name>/blobs/uploads/ (a new upload or a mount).
var (
	uploadPathRe  = regexp.MustCompile(`^/v2/(.+)/blobs/uploads/([^/]+)$`)
	uploadsPathRe = regexp.MustCompile(`^/v2/(.+)/blobs/uploads/?$`)
)

// quotaHandler holds quota for every write it passes to next: upload
// chunks as they stream, a manifest and a mounted blob by their size, and
// records what the registry committed.
type quotaHandler struct {
	quota      UploadQuota
	authorized func(req *http.Request, repository string) bool
	// mayPull reports whether the request's token may pull repository
	// (a mount's source).
	mayPull func(req *http.Request, repository string) bool
	// blobSize is the size of a blob the registry stores (any
	// repository's), or an error matching distribution.ErrBlobUnknown.
	blobSize func(ctx context.Context, digest string) (int64, error)
	// removeUpload deletes what an upload session of repository stored.
	removeUpload func(ctx context.Context, repository, upload string) error
	// uploadExists reports whether an upload session is still stored.
	uploadExists func(ctx context.Context, repository, upload string) (bool, error)
	// referenceSize is the stored size of a blob or manifest linked into
	// repository (ok false when it is not there).
	referenceSize func(ctx context.Context, repository, digest string) (size int64, ok bool, err error)
	next          http.Handler
	fail          func(http.ResponseWriter, *http.Request, error)
	logger        *slog.Logger
}

func (q *quotaHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	p := req.URL.Path
	switch req.Method {
	case http.MethodPatch, http.MethodPut:
		if m := uploadPathRe.FindStringSubmatch(p); m != nil && q.authorized(req, m[1]) {
			q.serveUploadWrite(w, req, m[1], m[2])
			return
		}
		if m := manifestPathRe.FindStringSubmatch(p); m != nil && req.Method == http.MethodPut && q.authorized(req, m[1]) {
			q.serveManifestPut(w, req, m[1])
			return
		}
	case http.MethodDelete:
		// A manifest's delete is the content gate's (ManifestDeleter),
		// which records it and has the project's blobs recounted.
		// The registry decides who may cancel an upload; once it
		// answered 204 the upload is gone.
		if m := uploadPathRe.FindStringSubmatch(p); m != nil {
			rw := &statusWriter{ResponseWriter: w}
			q.next.ServeHTTP(rw, req)
			if rw.status == http.StatusNoContent {
				q.drop(req.Context(), m[2])
			}
			return
		}
	case http.MethodPost:
		if m := uploadsPathRe.FindStringSubmatch(p); m != nil && req.URL.Query().Get("mount") != "" && q.authorized(req, m[1]) {
			q.serveMount(w, req, m[1])
			return
		}
	}
	q.next.ServeHTTP(w, req)
}

// serveUploadWrite streams a PATCH or PUT body of upload through a
// reader that holds quota before the registry sees each byte. A hold
// that does not fit ends the request: the upload's data is removed and
// the refusal answered in place of whatever the registry said.
func (q *quotaHandler) serveUploadWrite(w http.ResponseWriter, req *http.Request, repo, upload string) {
	ctx := req.Context()
	// Before the registry resumes the upload: an abandoned upload's
	// sweeper either released it already (the registry answers
	// BLOB_UPLOAD_UNKNOWN) or sees it live from now on, however long this
	// request then waits for its bytes.
	if err := q.quota.TouchHold(ctx, upload); err != nil {
		q.fail(w, req, err)
		return
	}
	var free int64
	if d := req.URL.Query().Get("digest"); req.Method == http.MethodPut && d != "" {
		// A final PUT names its digest before its data: a blob the
		// project holds already costs nothing again, up to its size (more
		// cannot match it; the registry refuses a mismatch and removes the
		// upload). Its commit only marks the blob used again, so the blob
		// must stay counted until then: UseCommitted marks it used now,
		// which keeps it from the recount that a manifest delete brings
		// (a blob no manifest references and used longer ago than
		// artifacts.RegistryHoldIdle), as that bound is longer than this
		// request (see UseCommitted's implementation).
		size, ok, err := q.quota.UseCommitted(ctx, repo, d)
		if err != nil {
			q.fail(w, req, err)
			return
		}
		if ok {
			free = size
		}
	}
	body := quotastream.New(req.Body, free, func(covered, need, want int64) (int64, error) {
		got, err := q.quota.HoldUpload(ctx, repo, upload, need-covered, want-covered)
		return covered + got, err
	}, func(unused int64) error {
		// What was held past the data is given back when the request
		// ends, the client gone or not.
		return q.quota.ShrinkHold(context.WithoutCancel(ctx), upload, unused)
	})
	req.Body = body
	rw := &statusWriter{ResponseWriter: w, mute: func() bool { return body.Err() != nil }}
	q.next.ServeHTTP(rw, req)
	var ref *Refusal
	switch {
	case errors.As(body.Err(), &ref):
		// Refused: nothing of the upload may stay, stored or counted.
		if err := q.removeUpload(ctx, repo, upload); err != nil {
			q.fail(w, req, fmt.Errorf("remove refused upload %s: %w", upload, err))
			return
		}
		q.drop(ctx, upload)
		writeDockerError(w, ref.Status, ref.Code, ref.Message)
		return
	case body.Err() != nil:
		// A hold that could not be written (the database away for a
		// moment, the client gone) refuses nothing: every byte the
		// registry stored was held, so the upload stays, counted, for the
		// client to resume; removing it would throw away a large push
		// for a blip.
		_ = body.Release()
		q.fail(w, req, body.Err())
		return
	}
	if err := body.Release(); err != nil {
		q.fail(rw, req, err)
		return
	}
	if req.Method != http.MethodPut {
		return
	}
	if rw.status == http.StatusCreated {
		d := rw.Header().Get("Docker-Content-Digest")
		size, err := q.blobSize(context.WithoutCancel(ctx), d) // the client may be gone after the 201
		if err == nil {
			err = q.quota.CommitBlobs(context.WithoutCancel(ctx), repo, upload, []BlobRef{{Digest: d, Size: size}})
		}
		if err != nil {
			// The blob is stored and the answer sent; the hold stays,
			// counting the bytes until it is dropped.
			q.fail(rw, req, fmt.Errorf("record blob %s of upload %s: %w", d, upload, err))
		}
		return
	}
	// A failed commit (a wrong digest) removes the upload; any other
	// failure leaves it to be resumed, still held.
	if ok, err := q.uploadExists(ctx, repo, upload); err == nil && !ok {
		q.drop(ctx, upload)
	}
}

// serveManifestPut holds a manifest's size before the registry stores it
// (it is a blob of the repository too), together with every blob it
// references that the project does not count: a blob stays stored after
// the last manifest referencing it is deleted and its quota given back
// (there is no garbage collection), and a client that finds it there
// skips its upload, so the manifest that references it again is what
// brings it back into the count. It records them all once stored.
func (q *quotaHandler) serveManifestPut(w http.ResponseWriter, req *http.Request, repo string) {
	body, ok := bufferManifest(w, req)
	if !ok {
		return
	}
	if len(body) > MaxManifestBytes {
		q.next.ServeHTTP(w, req) // the registry refuses it
		return
	}
	sum := sha256.Sum256(body)
	d := "sha256:" + hex.EncodeToString(sum[:])
	blobs, err := q.manifestBlobs(req.Context(), repo, req.Header.Get("Content-Type"), body)
	if err != nil {
		q.fail(w, req, err)
		return
	}
	q.serveHeld(w, req, repo, append([]BlobRef{{Digest: d, Size: int64(len(body))}}, blobs...))
}

// manifestBlobs returns the blobs and manifests body references, as
// distribution reads them, that are stored in repo, each once. A manifest
// the registry cannot read, or a reference not in repo, is the
// registry's to refuse; the registry stores nothing it references but
// what is linked into repo, which the pusher may pull, so no size named
// in a refusal is one of content the pusher may not read.
func (q *quotaHandler) manifestBlobs(ctx context.Context, repo, mediaType string, body []byte) ([]BlobRef, error) {
	m, _, err := distribution.UnmarshalManifest(mediaType, body)
	if err != nil {
		return nil, nil
	}
	var out []BlobRef
	seen := map[string]bool{}
	for _, ref := range m.References() {
		d := ref.Digest.String()
		if seen[d] || ref.Digest.Validate() != nil {
			continue
		}
		seen[d] = true
		size, ok, err := q.referenceSize(ctx, repo, d)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, BlobRef{Digest: d, Size: size})
		}
	}
	return out, nil
}

// serveMount holds the size of a blob mounted from another repository:
// free when the project holds it already. The registry mounts only from a
// named repository the pusher may pull; anything else is left to it (a
// plain upload starts, or the missing pull is refused) before the blob is
// looked up, so a refusal here never tells a pusher the size of content it
// may not read.
func (q *quotaHandler) serveMount(w http.ResponseWriter, req *http.Request, repo string) {
	if from := req.URL.Query().Get("from"); from == "" || !q.mayPull(req, from) {
		q.next.ServeHTTP(w, req)
		return
	}
	d := req.URL.Query().Get("mount")
	if _, err := digest.Parse(d); err != nil {
		q.next.ServeHTTP(w, req) // the registry starts a plain upload
		return
	}
	size, err := q.blobSize(req.Context(), d)
	if errors.Is(err, distribution.ErrBlobUnknown) {
		q.next.ServeHTTP(w, req) // nothing to mount: a plain upload starts
		return
	}
	if err != nil {
		q.fail(w, req, err)
		return
	}
	q.serveHeld(w, req, repo, []BlobRef{{Digest: d, Size: size}})
}

// serveHeld passes req on under a hold of blobs (the first is the one req
// stores), and turns the hold into the project's blobs when the registry
// answers 201.
func (q *quotaHandler) serveHeld(w http.ResponseWriter, req *http.Request, repo string, blobs []BlobRef) {
	ctx := req.Context()
	hold := "put:" + uuid.NewString()
	if err := q.quota.HoldBlobs(ctx, repo, hold, blobs); err != nil {
		var ref *Refusal
		if errors.As(err, &ref) {
			writeDockerError(w, ref.Status, ref.Code, ref.Message)
			return
		}
		q.fail(w, req, err)
		return
	}
	rw := &statusWriter{ResponseWriter: w}
	q.next.ServeHTTP(rw, req)
	ctx = context.WithoutCancel(ctx)
	if rw.status == http.StatusCreated {
		if got := rw.Header().Get("Docker-Content-Digest"); got != "" {
			blobs[0].Digest = got
		}
		if err := q.quota.CommitBlobs(ctx, repo, hold, blobs); err != nil {
			q.fail(rw, req, fmt.Errorf("record blob %s: %w", blobs[0].Digest, err))
		}
		return
	}
	q.drop(ctx, hold)
}

// drop forgets a hold; a failure leaves it counted, which errs on the
// side of the quota, until the hold sweeper gives it back.
func (q *quotaHandler) drop(ctx context.Context, hold string) {
	if err := q.quota.DropHold(context.WithoutCancel(ctx), hold); err != nil && q.logger != nil {
		q.logger.WarnContext(ctx, "registry: a push's quota hold could not be given back; the hold sweeper will", "hold", hold, "err", err)
	}
}

// statusWriter records the status the registry answers with and, while
// mute says so, drops the answer (the caller writes its own).
type statusWriter struct {
	http.ResponseWriter
	status int
	mute   func() bool
}

func (s *statusWriter) muted() bool { return s.mute != nil && s.mute() }

func (s *statusWriter) WriteHeader(code int) {
	if s.status != 0 {
		return
	}
	s.status = code
	if !s.muted() {
		s.ResponseWriter.WriteHeader(code)
	}
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.WriteHeader(http.StatusOK)
	}
	if s.muted() {
		return len(b), nil
	}
	return s.ResponseWriter.Write(b)
}

// RemoveUpload removes what upload session upload of repository has
// stored, so that it can be neither continued nor committed: the
// registry answers BLOB_UPLOAD_UNKNOWN to whatever comes next for it. The
// quota's sweeper calls it before it gives back an abandoned upload's
// hold. None stored (or an id no upload session has, such as a manifest's
// hold) is fine; so is a registry that keeps no quota.
func (r *Registry) RemoveUpload(ctx context.Context, repository, upload string) error {
	if r.uploads == nil {
		return nil
	}
	return r.uploads.removeUpload(ctx, repository, upload)
}

// uploadDataPath is where distribution's storage keeps an upload session
// of repository (registry/storage/paths.go, uploadDataPathSpec's parent).
func uploadDataPath(repository, upload string) string {
	return "/docker/registry/v2/repositories/" + repository + "/_uploads/" + upload
}

// uploadStore answers the quota handler's questions about stored uploads
// and blobs from the registry's storage driver.
type uploadStore struct {
	driver storagedriver.StorageDriver
	blobs  distribution.BlobStatter
	ns     distribution.Namespace
}

// referenceSize finds d among repository's layers (blobs pushed or
// mounted there) or, failing that, its manifests, as the registry does
// when it checks a manifest's references.
func (s uploadStore) referenceSize(ctx context.Context, repository, d string) (int64, bool, error) {
	dg, err := digest.Parse(d)
	if err != nil || !ValidRepository(repository) {
		return 0, false, nil
	}
	repo, err := s.ns.Repository(ctx, repositoryName(repository))
	if err != nil {
		return 0, false, err
	}
	desc, err := repo.Blobs(ctx).Stat(ctx, dg)
	if err == nil {
		return desc.Size, true, nil
	}
	if !errors.Is(err, distribution.ErrBlobUnknown) {
		return 0, false, err
	}
	ms, err := repo.Manifests(ctx)
	if err != nil {
		return 0, false, err
	}
	if ok, err := ms.Exists(ctx, dg); err != nil || !ok {
		return 0, false, err
	}
	size, err := s.blobSize(ctx, d)
	if errors.Is(err, distribution.ErrBlobUnknown) {
		return 0, false, nil
	}
	return size, err == nil, err
}

// ErrTooManyManifests is ReferencedBlobs' answer when the repositories
// hold more manifests than it was allowed to read.
var ErrTooManyManifests = errors.New("registry: too many manifests to recount")

// ReferencedBlobs returns the digests of every manifest stored in
// repositories and of everything those manifests reference (config,
// layers, an index's manifests), reading at most limit manifests
// (ErrTooManyManifests past that). A registry that keeps no quota
// answers nil.
func (r *Registry) ReferencedBlobs(ctx context.Context, repositories []string, limit int) (map[string]bool, error) {
	if r.uploads == nil {
		return nil, nil
	}
	return r.uploads.referencedBlobs(ctx, repositories, limit)
}

func (s uploadStore) referencedBlobs(ctx context.Context, repositories []string, limit int) (map[string]bool, error) {
	refs := map[string]bool{}
	n := 0
	for _, name := range repositories {
		// The filesystem driver's walk never looks at ctx: without these
		// checks a recount past its bound would read on to the end.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !ValidRepository(name) {
			continue // the registry stores nothing under it
		}
		repo, err := s.ns.Repository(ctx, repositoryName(name))
		if err != nil {
			return nil, err
		}
		ms, err := repo.Manifests(ctx)
		if err != nil {
			return nil, err
		}
		en, ok := ms.(distribution.ManifestEnumerator)
		if !ok {
			return nil, fmt.Errorf("registry: the manifests of %s cannot be listed", name)
		}
		tooMany, stopped := false, error(nil)
		err = en.Enumerate(ctx, func(d digest.Digest) error {
			if stopped = ctx.Err(); stopped != nil {
				return stopped // wrapped without %w, like the one below
			}
			if n++; n > limit {
				tooMany = true // the storage driver's walk wraps it without %w
				return ErrTooManyManifests
			}
			refs[d.String()] = true
			m, err := ms.Get(ctx, d)
			if err != nil {
				return fmt.Errorf("read manifest %s of %s: %w", d, name, err)
			}
			for _, ref := range m.References() {
				refs[ref.Digest.String()] = true
			}
			return nil
		})
		switch {
		case stopped != nil:
			return nil, stopped
		case tooMany:
			return nil, ErrTooManyManifests
		case errors.As(err, new(storagedriver.PathNotFoundError)):
			continue // nothing pushed there
		case err != nil:
			return nil, err
		}
	}
	return refs, nil
}

func (s uploadStore) blobSize(ctx context.Context, d string) (int64, error) {
	dg, err := digest.Parse(d)
	if err != nil {
		return 0, err
	}
	desc, err := s.blobs.Stat(ctx, dg)
	if err != nil {
		return 0, err
	}
	return desc.Size, nil
}

func (s uploadStore) removeUpload(ctx context.Context, repository, upload string) error {
	if !ValidRepository(repository) || uuid.Validate(upload) != nil {
		return nil // the registry refused it before storing anything
	}
	err := s.driver.Delete(ctx, uploadDataPath(repository, upload))
	if errors.As(err, new(storagedriver.PathNotFoundError)) {
		return nil
	}
	return err
}

func (s uploadStore) uploadExists(ctx context.Context, repository, upload string) (bool, error) {
	if !ValidRepository(repository) || uuid.Validate(upload) != nil {
		return false, nil
	}
	_, err := s.driver.Stat(ctx, uploadDataPath(repository, upload))
	if errors.As(err, new(storagedriver.PathNotFoundError)) {
		return false, nil
	}
	return err == nil, err
}
