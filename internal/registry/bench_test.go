package registry

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const benchImageSize = 8 << 20

// BenchmarkPushPull pushes and pulls a fresh ~8 MiB single-layer image per
// iteration: through the embedded registry with token auth (token round
// trips included), and through a standalone distribution App of the same
// library on its own http.Server without auth.
func BenchmarkPushPull(b *testing.B) {
	b.Run("embedded_token", func(b *testing.B) {
		env := newTestEnv(b, nil)
		env.authz.add("bench", "pw", "bench/img", ActionPush, ActionPull)
		benchPushPull(b, env.host, env.tr, &authn.Basic{Username: "bench", Password: "pw"})
	})
	b.Run("standalone_noauth", func(b *testing.B) {
		dc := &configuration.Configuration{Version: "0.1"}
		dc.Log.AccessLog.Disabled = true
		dc.HTTP.Secret = "bench-secret"
		dc.HTTP.RelativeURLs = true
		dc.Storage = configuration.Storage{
			"filesystem":  configuration.Parameters{"rootdirectory": b.TempDir()},
			"delete":      configuration.Parameters{"enabled": true},
			"redirect":    configuration.Parameters{"disable": true},
			"cache":       configuration.Parameters{"blobdescriptor": "inmemory"},
			"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}},
		}
		app := handlers.NewApp(context.Background(), dc)
		srv := httptest.NewServer(app)
		tr := remote.DefaultTransport.(*http.Transport).Clone()
		b.Cleanup(func() {
			tr.CloseIdleConnections()
			srv.Close()
			_ = app.Shutdown()
		})
		benchPushPull(b, srv.Listener.Addr().String(), tr, authn.Anonymous)
	})
}

func benchPushPull(b *testing.B, host string, tr http.RoundTripper, auth authn.Authenticator) {
	ctx := context.Background()
	opts := []remote.Option{remote.WithAuth(auth), remote.WithTransport(tr), remote.WithContext(ctx)}
	buf := make([]byte, benchImageSize)
	b.SetBytes(benchImageSize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		img := benchImage(b, buf)
		ref, err := name.ParseReference(fmt.Sprintf("%s/bench/img:v%d", host, i), name.Insecure)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		if err := remote.Write(ref, img, opts...); err != nil {
			b.Fatalf("push: %v", err)
		}
		d, _ := img.Digest()
		pulled, err := remote.Image(ref.Context().Digest(d.String()), opts...)
		if err != nil {
			b.Fatalf("pull: %v", err)
		}
		layers, err := pulled.Layers()
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range layers {
			rc, err := l.Compressed() // digest-verified while read
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, rc); err != nil {
				b.Fatalf("read layer: %v", err)
			}
			rc.Close()
		}
	}
}

// benchImage is an OCI image with one uncompressed layer of fresh random
// bytes (no gzip cost on either side, so the registry path is measured).
func benchImage(b *testing.B, buf []byte) v1.Image {
	_, _ = crand.Read(buf)
	layer := static.NewLayer(append([]byte(nil), buf...), types.OCIUncompressedLayer)
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layer)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := img.Digest(); err != nil {
		b.Fatal(err)
	}
	return img
}
