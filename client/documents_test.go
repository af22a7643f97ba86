package client_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/client"
)

// The documents the client reads whole into memory (the event contract, a
// release's manifest, signature and signing key) are bounded: a server that
// streams without end fails the call instead of exhausting memory.
func TestDocumentReadsAreBounded(t *testing.T) {
	chunk := []byte(strings.Repeat("x", 1<<20))
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 64 { // 64 MiB, far past any real document
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer s.Close()
	c := client.New(s.URL, "")
	ctx := t.Context()
	reads := map[string]func() (int, error){
		"AsyncAPI": func() (int, error) { b, err := c.AsyncAPI(ctx); return len(b), err },
		"GetPlatformReleaseManifest": func() (int, error) {
			b, err := c.GetPlatformReleaseManifest(ctx, "1.0.0")
			return len(b), err
		},
		"GetPlatformReleaseManifestSignature": func() (int, error) {
			s, err := c.GetPlatformReleaseManifestSignature(ctx, "1.0.0")
			return len(s), err
		},
		"GetPlatformReleaseSigningKey": func() (int, error) {
			b, err := c.GetPlatformReleaseSigningKey(ctx)
			return len(b), err
		},
	}
	for name, read := range reads {
		if n, err := read(); err == nil || n > 16<<20 {
			t.Errorf("%s read %d bytes, err %v; want an error within 16 MiB", name, n, err)
		}
	}
}
