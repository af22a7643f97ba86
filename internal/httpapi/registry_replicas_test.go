package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
)

// A manifest deleted through one replica is gone on every replica that
// shares the registry's storage, also on one that read it before. The
// embedded registry kept an in-memory cache of blob descriptors per
// process, and a replica that had read the manifest went on answering its
// HEAD, and serving it, from that cache after another replica deleted it.
func TestRegistryDeleteIsSeenByEveryReplica(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := servertest.TwoReplicas(t, func(c *config.Config) { c.RegistryDir = dir })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// b's seeding reset the admin's password: b's sign-in serves both.
	adminB := b.Admin()
	adminA := a.As(adminB.Token)
	hostA := adminA.Do("GET", "/api/v1/apps/registry", nil).Want(t, 200).String("registry_host")
	hostB := adminB.Do("GET", "/api/v1/apps/registry", nil).Want(t, 200).String("registry_host")
	if hostA == hostB {
		t.Fatalf("both replicas' registries are at %s", hostA)
	}
	repo, pub := publishIntent(t, adminB, b.Creds.ProjectID, map[string]any{"app_slug": "two-replicas", "app_version": "1.0.0", "artifact_name": "runtime"})
	img := quotaImage(t, patterned(61, 10_000))
	writeImage(t, ctx, hostA, repo, pub, img, nil)
	onA, onB := digestRef(t, hostA, repo, img), digestRef(t, hostB, repo, img)
	if _, err := remote.Get(onB, pub.opts(ctx)...); err != nil {
		t.Fatalf("replica b reads the manifest pushed through a: %v", err)
	}
	if err := remote.Delete(onA, pub.opts(ctx)...); err != nil {
		t.Fatalf("delete through replica a: %v", err)
	}
	gone := func(what string, err error) {
		t.Helper()
		var te *transport.Error
		if !errors.As(err, &te) || te.StatusCode != http.StatusNotFound {
			t.Fatalf("%s on replica b after the delete on a: %v, want 404", what, err)
		}
	}
	_, err := remote.Head(onB, pub.opts(ctx)...)
	gone("HEAD", err)
	_, err = remote.Get(onB, pub.opts(ctx)...)
	gone("GET", err)
}
