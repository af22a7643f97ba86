package registry

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// recordingQuota is an UploadQuota that grants everything, records what
// each manifest or mount put asked it to hold (by the digest put), and
// refuses the put of the digest refuse names.
type recordingQuota struct {
	*testAuthz
	mu     sync.Mutex
	held   map[string][]BlobRef
	refuse string
}

func (q *recordingQuota) HoldBlobs(_ context.Context, _, _ string, blobs []BlobRef) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held[blobs[0].Digest] = slices.Clone(blobs)
	if blobs[0].Digest == q.refuse {
		return &Refusal{Status: http.StatusForbidden, Code: "DENIED", Message: "registry quota exceeded"}
	}
	return nil
}

func (q *recordingQuota) heldFor(d string) []BlobRef {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held[d]
}

func (q *recordingQuota) HoldUpload(_ context.Context, _, _ string, _, want int64) (int64, error) {
	return want, nil
}
func (q *recordingQuota) UseCommitted(context.Context, string, string) (int64, bool, error) {
	return 0, false, nil
}
func (q *recordingQuota) ShrinkHold(context.Context, string, int64) error              { return nil }
func (q *recordingQuota) CommitBlobs(context.Context, string, string, []BlobRef) error { return nil }
func (q *recordingQuota) DropHold(context.Context, string) error                       { return nil }
func (q *recordingQuota) TouchHold(context.Context, string) error                      { return nil }

// An image index's put holds, beside the index itself, each child
// manifest it references at its stored size: the children are manifests,
// linked into the repository's manifest store, not its layers, so they
// are found there (referenceSize's second look). The quota decides which
// of them the project does not count yet (after a recount gave them back,
// or stored before the quota); a refusal is answered DENIED and the index
// is not stored.
func TestIndexPutHoldsItsChildManifests(t *testing.T) {
	t.Parallel()
	var quota *recordingQuota
	env := newTestEnvWith(t, nil, func(a *testAuthz) Authorizer {
		quota = &recordingQuota{testAuthz: a, held: map[string][]BlobRef{}}
		return quota
	})
	env.authz.add("publisher", "s3cret", appRepo, ActionPush, ActionPull)
	ctx := context.Background()
	opts := env.opts(ctx, &authn.Basic{Username: "publisher", Password: "s3cret"})
	c1, c2 := ociImage(t, 1024), ociImage(t, 2048)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, c := range []v1.Image{c1, c2} {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: c})
	}
	raw, err := idx.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	want := []BlobRef{{Digest: d.String(), Size: int64(len(raw))}}
	for _, c := range []v1.Image{c1, c2} {
		cd, _ := c.Digest()
		craw, _ := c.RawManifest()
		want = append(want, BlobRef{Digest: cd.String(), Size: int64(len(craw))})
	}

	quota.mu.Lock()
	quota.refuse = d.String()
	quota.mu.Unlock()
	err = remote.WriteIndex(env.ref(t, appRepo), idx, opts...)
	var te *transport.Error
	if !errors.As(err, &te) || len(te.Errors) == 0 || te.Errors[0].Code != "DENIED" {
		t.Fatalf("push of an index its quota refuses: %v; want DENIED", err)
	}
	if got := quota.heldFor(d.String()); !slices.Equal(got, want) {
		t.Fatalf("the index's put held %v; want the index and its two child manifests %v", got, want)
	}
	if _, err := remote.Head(env.ref(t, appRepo).Context().Digest(d.String()), opts...); err == nil {
		t.Fatal("the refused index is stored")
	}

	quota.mu.Lock()
	quota.refuse, quota.held = "", map[string][]BlobRef{}
	quota.mu.Unlock()
	if err := remote.WriteIndex(env.ref(t, appRepo), idx, opts...); err != nil {
		t.Fatalf("push of the index: %v", err)
	}
	if got := quota.heldFor(d.String()); !slices.Equal(got, want) {
		t.Fatalf("the index's put held %v; want %v", got, want)
	}
}

// The gate's IndexChildren reads an index's manifests from storage, those
// of an index it references too; an image manifest, or a digest the
// repository does not hold, has none.
func TestIndexLookupListsNestedChildren(t *testing.T) {
	t.Parallel()
	env := newTestEnvWith(t, nil, func(a *testAuthz) Authorizer {
		return &recordingQuota{testAuthz: a, held: map[string][]BlobRef{}}
	})
	env.authz.add("publisher", "s3cret", appRepo, ActionPush, ActionPull)
	ctx := context.Background()
	opts := env.opts(ctx, &authn.Basic{Username: "publisher", Password: "s3cret"})
	c1, c2, c3 := ociImage(t, 1024), ociImage(t, 2048), ociImage(t, 3072)
	inner := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: c1}, mutate.IndexAddendum{Add: c2})
	outer := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: inner}, mutate.IndexAddendum{Add: c3})
	if err := remote.WriteIndex(env.ref(t, appRepo), outer, opts...); err != nil {
		t.Fatalf("push of the nested index: %v", err)
	}
	digestOf := func(m interface{ Digest() (v1.Hash, error) }) string {
		d, err := m.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	children := indexLookup(env.reg.uploads.ns)
	for _, c := range []struct {
		of   string
		want []string
	}{
		{digestOf(outer), []string{digestOf(inner), digestOf(c1), digestOf(c2), digestOf(c3)}},
		{digestOf(c1), nil},
		{"sha256:" + strings.Repeat("0", 64), nil},
	} {
		got, err := children(ctx, appRepo, c.of)
		if err != nil {
			t.Fatalf("children of %s: %v", c.of, err)
		}
		slices.Sort(got)
		slices.Sort(c.want)
		if !slices.Equal(got, c.want) {
			t.Errorf("children of %s: %v, want %v", c.of, got, c.want)
		}
	}
}
