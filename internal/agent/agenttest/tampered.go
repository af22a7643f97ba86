package agenttest

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Tampered is a registry that answers every manifest request with the same
// manifest, whatever digest was asked for: a tampered or broken registry,
// or a poisoned cache in front of one. It listens on the host's loopback,
// which the engine treats as an insecure registry (no TLS needed).
type Tampered struct {
	// Repository is a repository on it; Asked a digest to pull it by,
	// which differs from Served, the digest of what it serves.
	Repository, Asked, Served string

	mu       sync.Mutex
	requests []string
}

// TamperedRegistry starts a Tampered registry for the test.
func TamperedRegistry(t testing.TB) *Tampered {
	manifest := `{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",` +
		`"config":{"mediaType":"application/vnd.docker.container.image.v1+json","size":2,"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},` +
		`"layers":[]}`
	r := &Tampered{Served: fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(manifest))),
		Asked: fmt.Sprintf("sha256:%x", sha256.Sum256([]byte("the image the platform pinned")))}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		switch {
		case strings.Contains(req.URL.Path, "/manifests/"):
			r.mu.Lock()
			r.requests = append(r.requests, req.URL.Path)
			r.mu.Unlock()
			w.Header().Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
			w.Header().Set("Docker-Content-Digest", r.Served)
			w.Header().Set("Content-Length", fmt.Sprint(len(manifest)))
			if req.Method == http.MethodGet {
				_, _ = w.Write([]byte(manifest))
			}
		case req.URL.Path == "/v2/":
		default:
			http.NotFound(w, req)
		}
	}))
	t.Cleanup(srv.Close)
	r.Repository = strings.TrimPrefix(srv.URL, "http://") + "/tampered/app"
	return r
}

// AskedByDigest reports whether the last manifest request named Asked.
func (r *Tampered) AskedByDigest() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.requests) > 0 && strings.HasSuffix(r.requests[len(r.requests)-1], "/v2/tampered/app/manifests/"+r.Asked)
}
