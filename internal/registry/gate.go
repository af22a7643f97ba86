package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"

	"github.com/gpuaas/gpuaas/internal/correlation"
)

// ContentGate is an optional extension of Authorizer. Tokens are scoped to
// a whole repository, which is too coarse for two promises the control
// plane makes about single digests: a revoked digest is never served again,
// and the signature of a verified digest cannot be replaced. The registry
// asks the gate on every manifest read, and on every manifest write or
// delete its credentials allow.
type ContentGate interface {
	// ManifestDenied reports whether the manifest with digest in
	// repository must not be served (it was revoked).
	ManifestDenied(ctx context.Context, repository, digest string) (bool, error)
	// TagFrozen reports whether tag in repository may no longer be
	// written or deleted (the signature or attestation tag of a verified
	// digest). A manifest a frozen tag points at cannot be deleted by its
	// digest either.
	TagFrozen(ctx context.Context, repository, tag string) (bool, error)
}

// ManifestDeleter is an optional extension of ContentGate: a delete of a
// manifest by its digest, which removes the image and every tag on it
// from the repository for good, is the gate's to allow and to record.
// Tokens grant "delete" on a whole repository, while the control plane
// still relies on some of its manifests (registered artifacts, what
// instances run).
type ManifestDeleter interface {
	// DeleteManifest decides whether subject (the token's "sub") may
	// delete the manifest digest of repository. If it may, it calls del,
	// which lets the registry delete it (and answer the request) and
	// reports whether the registry did, and records a delete that
	// happened. If it may not, it returns why, for the person who asked
	// (answered 403 DENIED), without calling del. refused is a refusal the
	// gate already decided (a frozen tag on the manifest): the deleter
	// records it and returns it. An error is a failure (500 when del was
	// not called; logged when it was). children reads the registry for it:
	// the child manifests of an image index the platform relies on are not
	// registered themselves, yet deleting one breaks the index's pulls of
	// that platform.
	DeleteManifest(ctx context.Context, subject, repository, digest, refused string, children IndexChildren, del func() (deleted bool)) (refusal string, err error)
}

// IndexChildren lists the manifests that the image index digest of the
// repository a delete is in references, those of the indexes it
// references too; nothing when digest is an image manifest or not stored
// there.
type IndexChildren func(ctx context.Context, digest string) ([]string, error)

// manifestPathRe splits /v2/<name>/manifests/<reference>, blobPathRe
// /v2/<name>/blobs/<digest>.
var (
	manifestPathRe = regexp.MustCompile(`^/v2/(.+)/manifests/([^/]+)$`)
	blobPathRe     = regexp.MustCompile(`^/v2/(.+)/blobs/([^/]+)$`)
)

// SignatureTagDigest returns the digest a cosign signature or attestation
// tag ("sha256-<hex>.sig", "sha256-<hex>.att") refers to.
func SignatureTagDigest(tag string) (string, bool) {
	rest, ok := strings.CutPrefix(tag, "sha256-")
	if !ok {
		return "", false
	}
	hex, ok := strings.CutSuffix(rest, ".sig")
	if !ok {
		if hex, ok = strings.CutSuffix(rest, ".att"); !ok {
			return "", false
		}
	}
	if len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", false
	}
	return "sha256:" + hex, true
}

// gateHandler wraps the registry handler with the gate's checks on
// manifests.
type gateHandler struct {
	gate ContentGate
	// authorized reports whether req's credentials grant what the registry
	// itself requires of req on repository (GET and HEAD: pull, PUT: pull
	// and push, DELETE: delete). The gate tells only such a caller that a
	// tag is frozen or a blob is a revoked manifest; anyone else gets the
	// registry's own answer (401 and its token challenge), as for any
	// other tag or digest, so a refusal reveals nothing about verification
	// or revocation to a caller who may not read or write there.
	authorized func(req *http.Request, repository string) bool
	// tagsOf returns the tags of repository that point at digest.
	tagsOf func(ctx context.Context, repository, digest string) ([]string, error)
	// subject returns the subject of req's token, which authorized
	// granted a delete in repository ("" if unknown).
	subject func(req *http.Request, repository string) string
	// indexChildren lists the manifests an image index of repository
	// references (Registry.IndexManifests); nil: none.
	indexChildren func(ctx context.Context, repository, digest string) ([]string, error)
	next          http.Handler
	fail          func(http.ResponseWriter, *http.Request, error)
	logger        *slog.Logger
}

func (g *gateHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	// A manifest is a blob of its repository too, and the registry
	// serves it by its digest at /blobs/ as well: a revoked one is
	// refused there as at /manifests/, but only to a caller who may pull
	// from the repository. Anyone else gets the registry's 401, whatever
	// the digest, and costs the gate no lookup.
	if b := blobPathRe.FindStringSubmatch(req.URL.Path); b != nil && (req.Method == http.MethodGet || req.Method == http.MethodHead) &&
		g.authorized(req, b[1]) {
		denied, err := g.gate.ManifestDenied(req.Context(), b[1], b[2])
		if err != nil {
			g.fail(w, req, err)
			return
		}
		if denied {
			writeDockerError(w, http.StatusNotFound, "BLOB_UNKNOWN", "blob "+b[2]+" is a revoked manifest and is no longer served")
			return
		}
	}
	// A blob is never deleted on its own: a delete credential frees room
	// by deleting manifests (which the gate checks), and the recount gives
	// back what no manifest references. Unlinking a layer would break
	// every image of the repository that uses it, a registered one too,
	// behind the gate's back. A caller who may not delete there gets the
	// registry's 401 as for anything else.
	if b := blobPathRe.FindStringSubmatch(req.URL.Path); b != nil && req.Method == http.MethodDelete {
		if g.authorized(req, b[1]) {
			writeDockerError(w, http.StatusMethodNotAllowed, "UNSUPPORTED",
				"blobs are not deleted one by one: delete the manifests that use "+b[2]+" (DELETE /v2/"+b[1]+"/manifests/<digest>), and the project's recount gives back what no manifest references")
			return
		}
		g.next.ServeHTTP(w, req)
		return
	}
	m := manifestPathRe.FindStringSubmatch(req.URL.Path)
	if m == nil {
		g.next.ServeHTTP(w, req)
		return
	}
	repo, ref := m[1], m[2]
	switch req.Method {
	case http.MethodPut, http.MethodDelete:
		// Writes the registry would refuse anyway are the registry's to
		// answer, before the gate looks at any tag.
		if !g.authorized(req, repo) {
			break
		}
		if strings.Contains(ref, ":") {
			// A manifest put by digest moves no tag; a delete by digest
			// removes the manifest and every tag pointing at it, so it is
			// refused when one of them is frozen.
			if req.Method != http.MethodDelete {
				break
			}
			g.serveManifestDelete(w, req, repo, ref)
			return
		}
		if d, ok := SignatureTagDigest(strings.ToLower(ref)); ok {
			g.serveSignatureTagWrite(w, req, repo, ref, d)
			return
		}
		if !g.tagWritable(w, req, repo, ref) {
			return
		}
	case http.MethodGet, http.MethodHead:
		// A tag resolves to a digest only inside the registry: decide
		// on the digest the response carries.
		gw := &gateWriter{ResponseWriter: w, check: func(d string) (bool, error) { return g.gate.ManifestDenied(req.Context(), repo, d) }}
		g.next.ServeHTTP(gw, req)
		if gw.err != nil && !gw.wrote {
			g.fail(w, req, gw.err)
		}
		return
	}
	g.next.ServeHTTP(w, req)
}

// serveManifestDelete passes on the delete of the manifest digest of repo
// (the registry allows it to req's token) unless a frozen tag points at it
// or the gate's ManifestDeleter refuses it. Everything from the checks to
// the registry's delete runs under the hold of repo@digest that
// verification and the registration of digest take too, so neither lands
// between the check and the delete: the delete is refused, or it comes
// first and the registration finds no manifest (the verification, no
// signature). The same hold takes repo's IndexesKey shared, which the
// registration of an image index holds exclusively from reading the
// index's manifests until it is recorded: the delete of a manifest the
// index references comes before that read (and the registration is
// refused), or after the index is recorded (and the delete is refused).
// Shared, it keeps no other delete in repo waiting.
func (g *gateHandler) serveManifestDelete(w http.ResponseWriter, req *http.Request, repo, digest string) {
	// A delete is audited: its row carries a correlation id, which the
	// answer names as the API's answers do.
	if correlation.ID(req.Context()) == "" {
		id := correlation.New()
		w.Header().Set("X-Request-ID", id)
		req = req.WithContext(correlation.With(req.Context(), id))
	}
	ctx := req.Context()
	release, ok := g.hold(w, req, DigestKey(repo, digest), Shared(IndexesKey(repo)))
	if !ok {
		return
	}
	defer release()
	tag, err := g.frozenTagOf(ctx, repo, digest)
	if err != nil {
		g.fail(w, req, err)
		return
	}
	var frozen string
	if tag != "" {
		frozen = "manifest " + digest + " is tagged " + tag + ", which holds the signature of a verified artifact: it can no longer be deleted"
	}
	d, ok := g.gate.(ManifestDeleter)
	if !ok {
		if frozen != "" {
			writeDockerError(w, http.StatusForbidden, "DENIED", frozen)
			return
		}
		g.next.ServeHTTP(w, req)
		return
	}
	var subject string
	if g.subject != nil {
		subject = g.subject(req, repo)
	}
	children := func(ctx context.Context, index string) ([]string, error) {
		if g.indexChildren == nil {
			return nil, nil
		}
		return g.indexChildren(ctx, repo, index)
	}
	rw := &statusWriter{ResponseWriter: w}
	refusal, err := d.DeleteManifest(ctx, subject, repo, digest, frozen, children, func() bool {
		g.next.ServeHTTP(rw, req)
		return rw.status == http.StatusAccepted
	})
	switch {
	case rw.status != 0:
		// The registry answered: whatever failed after it (the record of
		// a delete that happened) cannot change that answer.
		if err != nil && g.logger != nil {
			g.logger.ErrorContext(ctx, "registry: a manifest delete could not be recorded", "repository", repo, "digest", digest, "subject", subject, "err", err)
		}
	case err != nil:
		g.fail(w, req, err)
	case refusal != "":
		writeDockerError(w, http.StatusForbidden, "DENIED", refusal)
	default:
		// The gate neither refused nor let the registry delete.
		g.fail(w, req, errors.New("the manifest delete gate allowed the delete but did not pass it on"))
	}
}

// tagWritable asks the gate whether tag may be written or deleted and, if
// not, answers 403 (or the gate's failure) itself.
func (g *gateHandler) tagWritable(w http.ResponseWriter, req *http.Request, repo, tag string) bool {
	frozen, err := tagFrozen(req.Context(), g.gate, repo, tag)
	if err != nil {
		g.fail(w, req, err)
		return false
	}
	if frozen {
		writeDockerError(w, http.StatusForbidden, "DENIED",
			"tag "+tag+" holds the signature of a verified artifact and can no longer be changed")
		return false
	}
	return true
}

// serveSignatureTagWrite passes on a write or delete of tag, a signature or
// attestation tag of digest, with no gap between the gate's check and the
// registry's write that a verification could fall into. Checked when the
// headers arrive, a PUT whose body comes slowly (registry routes may
// stream for an hour) would be written long after the check, over the
// signature a verification in between read and froze. So the whole body
// is read first, bounded by the registry's manifest limit (a longer one
// reaches the registry cut one byte past the limit, and the registry
// refuses it), and only then are the check and the write done under
// the gate's KeyHolder (HoldKeys without one) on repo@digest, which
// verification holds from reading the signature until it has recorded the
// outcome: the write is refused as frozen, or the verification reads what
// it wrote.
func (g *gateHandler) serveSignatureTagWrite(w http.ResponseWriter, req *http.Request, repo, tag, digest string) {
	if req.Method == http.MethodPut {
		if _, ok := bufferManifest(w, req); !ok {
			return
		}
	}
	release, ok := g.hold(w, req, DigestKey(repo, digest))
	if !ok {
		return
	}
	defer release()
	if !g.tagWritable(w, req, repo, tag) {
		return
	}
	g.next.ServeHTTP(w, req)
}

// hold takes the gate's KeyHolder (HoldKeys without one) on keys for
// req, all in one hold; when it cannot, it answers req itself (or not at
// all, the client gone while waiting) and ok is false.
func (g *gateHandler) hold(w http.ResponseWriter, req *http.Request, keys ...Key) (release func(), ok bool) {
	hold := HoldKeys
	if h, ok := g.gate.(KeyHolder); ok {
		hold = h.HoldKeys
	}
	release, err := hold(req.Context(), keys...)
	if err != nil {
		if req.Context().Err() == nil { // else the client went away while waiting
			g.fail(w, req, err)
		}
		return nil, false
	}
	return release, true
}

// frozenTagOf returns a frozen tag of repo that points at digest, or "".
// An invalid repository name is the registry's to refuse.
func (g *gateHandler) frozenTagOf(ctx context.Context, repo, digest string) (string, error) {
	if !ValidRepository(repo) {
		return "", nil
	}
	tags, err := g.tagsOf(ctx, repo, digest)
	if err != nil {
		return "", err
	}
	for _, tag := range tags {
		frozen, err := tagFrozen(ctx, g.gate, repo, tag)
		if err != nil {
			return "", err
		}
		if frozen {
			return tag, nil
		}
	}
	return "", nil
}

// tagFrozen asks the gate about tag and, when it has upper-case letters,
// about its lower-case spelling too. Tags are case-sensitive in the
// registry, but the filesystem storage keeps each tag in a directory named
// after it, and on a case-insensitive filesystem (macOS and Windows
// defaults, where `gpuaas dev` runs) "SHA256-<HEX>.SIG" is the directory
// of the frozen "sha256-<hex>.sig": writing one rewrites the other.
func tagFrozen(ctx context.Context, gate ContentGate, repo, tag string) (bool, error) {
	frozen, err := gate.TagFrozen(ctx, repo, tag)
	if err != nil || frozen {
		return frozen, err
	}
	if lower := strings.ToLower(tag); lower != tag {
		return gate.TagFrozen(ctx, repo, lower)
	}
	return false, nil
}

// gateWriter holds back a successful manifest response until the gate has
// seen its digest; a denied one becomes 404 MANIFEST_UNKNOWN and its body
// is dropped.
type gateWriter struct {
	http.ResponseWriter
	check  func(digest string) (bool, error)
	denied bool
	wrote  bool
	err    error
}

func (g *gateWriter) WriteHeader(code int) {
	if g.wrote || g.denied || g.err != nil {
		return
	}
	if code == http.StatusOK {
		d := g.Header().Get("Docker-Content-Digest")
		denied, err := g.check(d)
		if err != nil {
			g.err = err
			return
		}
		if denied {
			g.denied = true
			for _, h := range []string{"Docker-Content-Digest", "Content-Length", "Content-Type", "Etag"} {
				g.Header().Del(h)
			}
			writeDockerError(g.ResponseWriter, http.StatusNotFound, "MANIFEST_UNKNOWN", "manifest "+d+" was revoked and is no longer served")
			return
		}
	}
	g.wrote = true
	g.ResponseWriter.WriteHeader(code)
}

func (g *gateWriter) Write(b []byte) (int, error) {
	if !g.wrote {
		g.WriteHeader(http.StatusOK)
	}
	if g.denied || g.err != nil {
		return len(b), nil
	}
	return g.ResponseWriter.Write(b)
}

// bufferManifest reads a manifest PUT's whole body, bounded by the
// registry's manifest limit (a longer one reaches the registry cut one
// byte past the limit, and the registry refuses it), and puts it back for
// the registry to read. A body that could not be read (the client went
// away or its stream's deadline passed) is answered here: ok is false.
func bufferManifest(w http.ResponseWriter, req *http.Request) (body []byte, ok bool) {
	body, err := io.ReadAll(io.LimitReader(req.Body, MaxManifestBytes+1))
	if err != nil {
		writeDockerError(w, http.StatusBadRequest, "MANIFEST_INVALID", "the manifest could not be read")
		return nil, false
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	return body, true
}

// writeDockerError writes the distribution API's error body.
func writeDockerError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}
