package httpapi_test

import (
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// An image index (a multi-platform image) is counted like its images: a
// push counts each blob of its child images once, their manifests and
// the index's own; an index that does not fit is refused DENIED and
// counts nothing. A child manifest the index still references stays
// counted after the child itself is deleted (the index's path through the
// recount), while what only that child referenced goes; deleting the
// index then gives back it and that child's manifest, and keeps what the
// remaining images reference.
func TestRegistryQuotaCountsAnImageIndex(t *testing.T) {
	t.Parallel()
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		ctx, s, clk, recounter, host, intent := clockedQuotaRepos(t, d)
		repo, creds := intent("multi")
		idle := artifacts.RegistryHoldIdle(s.App.Config.StreamTimeout) + time.Minute
		usage := func(want int64, when string) {
			t.Helper()
			if c, h := regUsage(t, s); c != want || h != 0 {
				t.Fatalf("%s: %d committed, %d held; want %d, 0", when, c, h, want)
			}
		}
		// goneIdle deletes manifest m and waits for the recount once what
		// was pushed is idle past RegistryHoldIdle.
		goneIdle := func(m interface{ Digest() (v1.Hash, error) }) {
			t.Helper()
			d, err := m.Digest()
			if err != nil {
				t.Fatal(err)
			}
			deleteManifest(t, ctx, s, recounter, host, repo, d)
			clk.Advance(idle)
			kickSweep(t, ctx, recounter)
		}
		tag := func(tag string) name.Tag {
			ref, err := name.NewTag(host+"/"+repo+":"+tag, name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			return ref
		}

		shared, l1, l2 := patterned(60, 10_000), patterned(61, 15_000), patterned(62, 15_000)
		c1, c2 := quotaImage(t, shared, l1), quotaImage(t, shared, l2)
		idx := quotaIndex(t, c1, c2)
		if err := remote.WriteIndex(tag("v1"), idx, creds.opts(ctx)...); err != nil {
			t.Fatalf("push of the index: %v", err)
		}
		idxBytes := rawSize(t, idx)
		c1Only := imageBytes(t, c1) - int64(len(shared)) - rawSize(t, c1) // l1 and c1's config
		want := imageBytes(t, c1) + imageBytes(t, c2) - int64(len(shared)) + idxBytes
		usage(want, "after pushing the index")

		// A second index, of the same two images and a third whose blobs
		// just fit: the third image is counted, the index itself is not
		// and is refused.
		room := testRegistryQuota - want
		probe := quotaImage(t, patterned(63, 50_000))
		overhead := imageBytes(t, probe) - 50_000
		jSize := rawSize(t, quotaIndex(t, c1, c2, probe))
		c3 := quotaImage(t, patterned(63, int(room-overhead-jSize/2)))
		j := quotaIndex(t, c1, c2, c3)
		if c3b, jb := imageBytes(t, c3), rawSize(t, j); c3b > room || c3b+jb <= room {
			t.Fatalf("test setup: image of %d bytes and index of %d bytes for a room of %d; want the image to fit and the index not", c3b, jb, room)
		}
		jDigest, err := j.Digest()
		if err != nil {
			t.Fatal(err)
		}
		err = remote.WriteIndex(tag("v2"), j, creds.opts(ctx)...)
		wantRegistryError(t, err, "DENIED", "--project-registry-quota-bytes", jDigest.String())
		want += imageBytes(t, c3)
		usage(want, "after the refused index")
		if _, err := remote.Head(tag("v2"), creds.opts(ctx)...); err == nil {
			t.Fatal("the refused index is stored")
		}

		// The first child goes, the index stays: its manifest stays
		// counted (the index references it), its own layer and config go.
		goneIdle(c1)
		want -= c1Only
		usage(want, "after deleting the first child image, its index kept")

		// The index goes: it and the first child's manifest are given
		// back; the second image and the third stay.
		goneIdle(idx)
		want -= idxBytes + rawSize(t, c1)
		usage(want, "after deleting the index")
		if want != imageBytes(t, c2)+imageBytes(t, c3) {
			t.Fatalf("left counted %d; want the second and third images' %d", want, imageBytes(t, c2)+imageBytes(t, c3))
		}
	})
}

// quotaIndex is an OCI image index of imgs, one platform each.
func quotaIndex(t *testing.T, imgs ...v1.Image) v1.ImageIndex {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for i, img := range imgs {
		arch := []string{"amd64", "arm64", "riscv64"}[i]
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	return idx
}

// rawSize is the size of an image's or an index's manifest.
func rawSize(t *testing.T, m interface{ RawManifest() ([]byte, error) }) int64 {
	t.Helper()
	raw, err := m.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(raw))
}
