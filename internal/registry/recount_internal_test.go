package registry

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// A recount sees every manifest stored in the repositories it is given
// and what each references, not a deleted one nor what only that one
// referenced; a repository nothing was pushed to is empty; and it reads
// no more manifests than its limit.
func TestReferencedBlobs(t *testing.T) {
	t.Parallel()
	var root string
	env := newTestEnv(t, func(c *Config) { root = c.RootDir })
	env.authz.add("publisher", "s3cret", appRepo, ActionPush, ActionPull, ActionDelete)
	ctx := context.Background()
	auth := &authn.Basic{Username: "publisher", Password: "s3cret"}
	kept, gone := ociImage(t, 1024), ociImage(t, 2048)
	for _, img := range []v1.Image{kept, gone} {
		d, _ := img.Digest()
		if err := remote.Write(env.ref(t, appRepo).Context().Digest(d.String()), img, env.opts(ctx, auth)...); err != nil {
			t.Fatal(err)
		}
	}
	dGone, _ := gone.Digest()
	if err := remote.Delete(env.ref(t, appRepo).Context().Digest(dGone.String()), env.opts(ctx, auth)...); err != nil {
		t.Fatal(err)
	}
	_, ns, err := openStorage(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	us := uploadStore{ns: ns, blobs: ns.BlobStatter()}
	refs, err := us.referencedBlobs(ctx, []string{appRepo, otherRepo, "../not/valid"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for img, in := range map[v1.Image]bool{kept: true, gone: false} {
		m, _ := img.Manifest()
		d, _ := img.Digest()
		for _, dg := range []v1.Hash{d, m.Config.Digest, m.Layers[0].Digest} {
			if refs[dg.String()] != in {
				t.Errorf("%s referenced: %v, want %v", dg, refs[dg.String()], in)
			}
			if in {
				want[dg.String()] = true
			}
		}
	}
	if len(refs) != len(want) {
		t.Errorf("referenced %v, want %v", refs, want)
	}
	if _, err := us.referencedBlobs(ctx, []string{appRepo}, 0); !errors.Is(err, ErrTooManyManifests) {
		t.Fatalf("past the limit: %v, want ErrTooManyManifests", err)
	}
	// A recount past its bound stops reading: the storage driver's walk
	// does not look at the context itself.
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := us.referencedBlobs(stopped, []string{appRepo}, 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("with its context done: %v, want context.Canceled", err)
	}
}
