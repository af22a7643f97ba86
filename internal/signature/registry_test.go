package signature

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sirupsen/logrus"
)

func init() {
	// The registry logs every request at info level; keep test output readable.
	logrus.SetLevel(logrus.ErrorLevel)
}

// newRegistry starts a real CNCF distribution v3 registry (in-memory storage,
// no auth) and returns its host:port.
func newRegistry(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	config := &configuration.Configuration{
		Storage: configuration.Storage{
			"inmemory": configuration.Parameters{},
			"maintenance": configuration.Parameters{"uploadpurging": map[any]any{
				"enabled": false,
			}},
		},
	}
	config.Log.Level = "error"
	config.Log.AccessLog.Disabled = true
	srv := httptest.NewServer(handlers.NewApp(ctx, config))
	t.Cleanup(func() {
		srv.Close()
		cancel()
	})
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushRandomImage pushes a random image to host/repo and returns its RepoDigest.
func pushRandomImage(t *testing.T, host, repo string) RepoDigest {
	t.Helper()
	r, err := name.NewRepository(host+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r.Tag("v1"), img, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := NewRepoDigest(r, d.String())
	if err != nil {
		t.Fatal(err)
	}
	return ref
}
