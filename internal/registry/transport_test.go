package registry

import (
	"bytes"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

// An in-process answer streams: a reader that stops after what it wants
// (a signature layer's size limit) stops the handler too, so a blob far
// larger than its descriptor claims is never held whole in memory.
func TestHandlerTransportStreams(t *testing.T) {
	const total = 64 << 20
	var written atomic.Int64
	done := make(chan error, 1)
	tr := HandlerTransport{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Docker-Content-Digest", "sha256:x")
		chunk := bytes.Repeat([]byte{'x'}, 32<<10)
		for written.Load() < total {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	})}
	req, _ := http.NewRequest("GET", "http://registry.test/v2/a/b/blobs/sha256:x", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != "sha256:x" {
		t.Fatalf("head: %d %v", resp.StatusCode, resp.Header)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || len(b) != 1<<20 {
		t.Fatalf("read %d bytes: %v", len(b), err)
	}
	resp.Body.Close()
	if err := <-done; err == nil {
		t.Fatal("the handler wrote its whole answer to a reader that had stopped")
	}
	if n := written.Load(); n > 2<<20 {
		t.Errorf("the handler wrote %d bytes for a reader that took 1 MiB", n)
	}

	// A HEAD has its head and no body; a handler that writes nothing is a
	// 200 with an empty body.
	tr.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			w.Header().Set("Content-Length", "42")
			w.WriteHeader(http.StatusOK)
		}
	})
	req, _ = http.NewRequest("HEAD", "http://registry.test/v2/a/b/blobs/sha256:x", nil)
	if resp, err = tr.RoundTrip(req); err != nil || resp.StatusCode != 200 || resp.ContentLength != 42 {
		t.Fatalf("HEAD: %v %v", resp, err)
	}
	req, _ = http.NewRequest("GET", "http://registry.test/v2/", nil)
	if resp, err = tr.RoundTrip(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("empty answer: %v %v", resp, err)
	}
	if b, _ := io.ReadAll(resp.Body); len(b) != 0 {
		t.Errorf("empty answer has a body: %q", b)
	}
}
