package registry

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
)

// ContentGate is an optional extension of Authorizer. Tokens are scoped to
// a whole repository, which is too coarse for two promises the control
// plane makes about single digests: a revoked digest is never served again,
// and the signature of a verified digest cannot be replaced. The registry
// asks the gate on every manifest read and write.
type ContentGate interface {
	// ManifestDenied reports whether the manifest with digest in
	// repository must not be served (it was revoked).
	ManifestDenied(ctx context.Context, repository, digest string) (bool, error)
	// TagFrozen reports whether tag in repository may no longer be
	// written (the signature or attestation tag of a verified digest).
	TagFrozen(ctx context.Context, repository, tag string) (bool, error)
}

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

// gated wraps the registry handler with gate's checks on manifests.
func gated(gate ContentGate, next http.Handler, fail func(http.ResponseWriter, *http.Request, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// A manifest is a blob of its repository too, and the registry
		// serves it by its digest at /blobs/ as well: a revoked one is
		// refused there as at /manifests/.
		if b := blobPathRe.FindStringSubmatch(req.URL.Path); b != nil && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
			denied, err := gate.ManifestDenied(req.Context(), b[1], b[2])
			if err != nil {
				fail(w, req, err)
				return
			}
			if denied {
				writeDockerError(w, http.StatusNotFound, "BLOB_UNKNOWN", "blob "+b[2]+" is a revoked manifest and is no longer served")
				return
			}
		}
		m := manifestPathRe.FindStringSubmatch(req.URL.Path)
		if m == nil {
			next.ServeHTTP(w, req)
			return
		}
		repo, ref := m[1], m[2]
		switch req.Method {
		case http.MethodPut, http.MethodDelete:
			// Anonymous writes are the registry's to refuse (401), so the
			// gate tells nothing about tags to callers without credentials.
			// Any credentials are checked, whatever the scheme's case: the
			// registry reads "bearer" as "Bearer".
			if strings.Contains(ref, ":") || req.Header.Get("Authorization") == "" {
				break
			}
			frozen, err := tagFrozen(req.Context(), gate, repo, ref)
			if err != nil {
				fail(w, req, err)
				return
			}
			if frozen {
				writeDockerError(w, http.StatusForbidden, "DENIED",
					"tag "+ref+" holds the signature of a verified artifact and can no longer be changed")
				return
			}
		case http.MethodGet, http.MethodHead:
			// A tag resolves to a digest only inside the registry: decide
			// on the digest the response carries.
			gw := &gateWriter{ResponseWriter: w, check: func(d string) (bool, error) { return gate.ManifestDenied(req.Context(), repo, d) }}
			next.ServeHTTP(gw, req)
			if gw.err != nil && !gw.wrote {
				fail(w, req, gw.err)
			}
			return
		}
		next.ServeHTTP(w, req)
	})
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

// writeDockerError writes the distribution API's error body.
func writeDockerError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}
