package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"
)

// ControlPlaneSubject is the "sub" of tokens the control plane mints for
// its own registry client.
const ControlPlaneSubject = "gpuaas-control-plane"

// manifestAccept lists the manifest media types the client accepts.
var manifestAccept = strings.Join([]string{
	"application/vnd.oci.image.manifest.v1+json",
	"application/vnd.oci.image.index.v1+json",
	"application/vnd.docker.distribution.manifest.v2+json",
	"application/vnd.docker.distribution.manifest.list.v2+json",
}, ", ")

// IndexMediaType reports whether mt, a manifest's media type, is an image
// index's (OCI) or a manifest list's (Docker): a manifest that references
// other manifests, one per platform.
func IndexMediaType(mt string) bool {
	return mt == "application/vnd.oci.image.index.v1+json" || mt == "application/vnd.docker.distribution.manifest.list.v2+json"
}

// Client is the control plane's client of the registry. It authenticates
// with pull tokens it mints for itself, so it works against the embedded
// registry (in-process, through its handler) and against an external
// registry that trusts this package's tokens (over HTTP).
type Client struct {
	base   *url.URL
	hc     *http.Client
	tokens *TokenHandler
}

func newHTTPClient(baseURL string, tokens *TokenHandler, rt http.RoundTripper) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, invalidf("registry_config_invalid", "registry url: %v", err)
	}
	return &Client{
		base:   u,
		tokens: tokens,
		hc: &http.Client{
			Transport: rt,
			// Registries may redirect blob reads to storage; manifests stay
			// put, and a redirect must not carry the bearer token elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// PullToken mints the control plane's own short-lived token to pull from
// repository (subject ControlPlaneSubject).
func (c *Client) PullToken(repository string) (string, error) {
	tok, err := c.tokens.Issue(Subject{ID: ControlPlaneSubject}, []Scope{{Type: "repository", Name: repository, Actions: []string{ActionPull}}})
	return tok.Token, err
}

// ManifestExists checks that repository holds a manifest at digest and
// returns its media type and size. It returns ErrNotFound when it does
// not, ErrInvalidArgument for a malformed repository or digest.
func (c *Client) ManifestExists(ctx context.Context, repository, dgst string) (mediaType string, size int64, err error) {
	if err := checkRepository(repository); err != nil {
		return "", 0, invalidf("invalid_reference", "%v", err)
	}
	d, err := digest.Parse(dgst)
	if err != nil {
		return "", 0, invalidf("invalid_reference", "digest %q: %v", dgst, err)
	}
	resp, err := c.head(ctx, repository, "manifests", d.String())
	if err != nil {
		return "", 0, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return "", 0, notFoundf("manifest_not_found", "manifest %s@%s", repository, d)
	default:
		// The embedded registry answers 500 for a manifest HEAD of a digest
		// that names a layer or config blob: tell that apart from an outage.
		if blob, berr := c.head(ctx, repository, "blobs", d.String()); berr == nil && blob.StatusCode == http.StatusOK {
			return "", 0, notFoundf(CodeNotAManifest, "%s@%s is a blob (a layer or config), not a manifest", repository, d)
		}
		return "", 0, unavailablef("registry_unavailable", "HEAD manifest %s@%s: status %d", repository, d, resp.StatusCode)
	}
	if got := resp.Header.Get("Docker-Content-Digest"); got != "" && got != d.String() {
		return "", 0, unavailablef("registry_unavailable", "registry answered digest %s for %s", got, d)
	}
	mediaType = resp.Header.Get("Content-Type")
	if i := strings.IndexByte(mediaType, ';'); i >= 0 {
		mediaType = strings.TrimSpace(mediaType[:i])
	}
	size, err = strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
	if err != nil || size < 0 {
		return "", 0, unavailablef("registry_unavailable", "HEAD manifest %s@%s: bad Content-Length", repository, d)
	}
	return mediaType, size, nil
}

// CodeNotAManifest is the code of the ErrNotFound that ManifestExists
// returns for a digest the registry holds as a blob, not as a manifest.
const CodeNotAManifest = "not_a_manifest"

// ResolveTag returns the digest of the manifest tag points at in
// repository, or ErrNotFound.
func (c *Client) ResolveTag(ctx context.Context, repository, tag string) (string, error) {
	if err := checkRepository(repository); err != nil {
		return "", invalidf("invalid_reference", "%v", err)
	}
	resp, err := c.head(ctx, repository, "manifests", tag)
	if err != nil {
		return "", err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return "", notFoundf("tag_not_found", "tag %s:%s", repository, tag)
	default:
		return "", unavailablef("registry_unavailable", "HEAD manifest %s:%s: status %d", repository, tag, resp.StatusCode)
	}
	d, err := digest.Parse(resp.Header.Get("Docker-Content-Digest"))
	if err != nil {
		return "", unavailablef("registry_unavailable", "HEAD manifest %s:%s: no valid Docker-Content-Digest", repository, tag)
	}
	return d.String(), nil
}

// head sends an authenticated HEAD for /v2/<repository>/<kind>/<ref> with
// the manifest Accept types; the body is drained and closed.
func (c *Client) head(ctx context.Context, repository, kind, ref string) (*http.Response, error) {
	tok, err := c.PullToken(repository)
	if err != nil {
		return nil, err
	}
	u := c.base.JoinPath("v2", repository, kind, ref)
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", manifestAccept)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, unavailablef("registry_unavailable", "%v", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp, nil
}

// HandlerTransport serves requests in-process through Handler, without a
// network round trip. The answer streams: its body is what the handler
// writes, as it writes it, so a reader that stops (a size limit reached)
// stops the handler too, and a blob far larger than its descriptor says
// is never held in memory. With PlainHTTP it refuses https requests, as a
// plain HTTP listener would: OCI clients probe https first and must fall
// back to http.
type HandlerTransport struct {
	Handler   http.Handler
	PlainHTTP bool
}

// RoundTrip implements http.RoundTripper: it returns once the handler has
// written its answer's head (or returned), and the body is the rest of
// what it writes. Close the body, as with any transport: the handler waits
// on it.
func (t HandlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.PlainHTTP && req.URL.Scheme == "https" {
		return nil, errors.New("registry listener speaks plain HTTP")
	}
	req = req.Clone(req.Context())
	if req.Host == "" {
		req.Host = req.URL.Host
	}
	req.RequestURI = req.URL.RequestURI()
	if req.Body == nil {
		req.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, body: pw, head: make(chan struct{})}
	go func() {
		defer func() {
			if v := recover(); v != nil {
				w.WriteHeader(http.StatusInternalServerError)
				_ = pw.CloseWithError(fmt.Errorf("registry handler panicked: %v", v))
				return
			}
			w.WriteHeader(http.StatusOK) // a handler that wrote nothing
			_ = pw.Close()
		}()
		t.Handler.ServeHTTP(w, req)
	}()
	select {
	case <-w.head:
	case <-req.Context().Done():
		_ = pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	resp := &http.Response{StatusCode: w.code, Status: fmt.Sprintf("%d %s", w.code, http.StatusText(w.code)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: w.sent, Body: pr, ContentLength: -1, Request: req}
	if n, err := strconv.ParseInt(w.sent.Get("Content-Length"), 10, 64); err == nil {
		resp.ContentLength = n
	}
	if req.Method == http.MethodHead {
		resp.Body = http.NoBody
		_ = pr.Close() // anything the handler writes to a HEAD goes nowhere
	}
	return resp, nil
}

// pipeWriter is the handler's side of a HandlerTransport answer.
type pipeWriter struct {
	header http.Header
	sent   http.Header // the head as it was when written
	code   int
	body   *io.PipeWriter
	head   chan struct{} // closed once the head is written
	once   sync.Once
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.code, w.sent = code, w.header.Clone()
		close(w.head)
	})
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// Flush is a no-op: every write goes straight to the reader.
func (w *pipeWriter) Flush() {}
