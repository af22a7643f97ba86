package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/releases"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// The releases domain's storage (releases.Store) on both dialects: drafts,
// artifact upsert, publish once, published-only newest-first listing.
func TestReleasesConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		s := store.Releases(db)
		q := s.Read()
		_, err := q.GetRelease(ctx, "1.0.0")
		wantErr(t, "get missing", err, storage.ErrNotFound)
		for _, v := range []string{"1.0.0", "1.1.0", "2.0.0-rc.1"} {
			noErr(t, "insert "+v, s.Mutate(ctx, func(tx releases.Tx) error {
				if err := tx.InsertRelease(ctx, releases.Release{Version: v, State: releases.StateDraft, CreatedBy: "user:u", CreatedAt: t0}); err != nil {
					return err
				}
				return audited(tx)
			}))
		}
		wantErr(t, "insert twice", q.InsertRelease(ctx, releases.Release{Version: "1.0.0", State: releases.StateDraft, CreatedBy: "x", CreatedAt: t0}), storage.ErrAlreadyExists)
		a := releases.Artifact{Version: "1.0.0", Name: "gpuaas-linux-amd64", OS: "linux", Arch: "amd64", Kind: releases.KindCLI,
			MediaType: "application/octet-stream", Digest: "sha256:aa", Size: 3, Location: "blobstore:sha256:aa", UploadedBy: "user:u", UploadedAt: t0}
		noErr(t, "put", q.PutReleaseArtifact(ctx, a))
		a.Digest, a.Size, a.Location = "sha256:bb", 5, "blobstore:sha256:bb"
		noErr(t, "replace", q.PutReleaseArtifact(ctx, a))
		b := a
		b.Name, b.OS, b.Arch = "gpuaas-darwin-arm64", "darwin", "arm64"
		noErr(t, "put second", q.PutReleaseArtifact(ctx, b))
		arts, err := q.ListReleaseArtifacts(ctx, "1.0.0")
		noErr(t, "list artifacts", err)
		same(t, "artifacts", arts, []releases.Artifact{b, a})

		listed, err := q.ListPublishedReleases(ctx, 10)
		noErr(t, "list drafts", err)
		same(t, "no published", len(listed), 0)
		for i, v := range []string{"1.0.0", "1.1.0"} {
			r := releases.Release{Version: v, Manifest: []byte(`{"version":"` + v + `"}`), Signature: "c2ln", SigningKID: "k1", PublishedBy: "user:u", PublishedAt: at(time.Duration(i) * time.Second)}
			noErr(t, "publish "+v, q.PublishRelease(ctx, r))
		}
		wantErr(t, "publish twice", q.PublishRelease(ctx, releases.Release{Version: "1.0.0", PublishedAt: t0}), storage.ErrConflict)
		wantErr(t, "publish missing", q.PublishRelease(ctx, releases.Release{Version: "9.9.9", PublishedAt: t0}), storage.ErrConflict)
		listed, err = q.ListPublishedReleases(ctx, 10)
		noErr(t, "list", err)
		var versions []string
		for _, r := range listed {
			versions = append(versions, r.Version)
		}
		same(t, "newest first", versions, []string{"1.1.0", "1.0.0"})
		r, err := q.GetRelease(ctx, "1.1.0")
		noErr(t, "get", err)
		same(t, "state", r.State, releases.StatePublished)
		same(t, "manifest", string(r.Manifest), `{"version":"1.1.0"}`)
		same(t, "published_at", r.PublishedAt, at(time.Duration(1)*time.Second))
		same(t, "signature", r.Signature+r.SigningKID+r.PublishedBy, "c2lnk1user:u")
	})
}

// On PostgreSQL an upload and a publish of one version take turns on the
// release row (LockRelease): a mutation that locks it after another has
// waits for that one's commit and sees what it wrote, so a publish signs
// every artifact an upload that read the draft commits. (On SQLite a
// mutation holds the whole database.)
func TestLockReleaseMakesUploadsAndPublishTakeTurns(t *testing.T) {
	db := storetest.Open(t, store.Postgres)
	ctx := context.Background()
	s := store.Releases(db)
	noErr(t, "insert", s.Mutate(ctx, func(tx releases.Tx) error {
		if err := tx.InsertRelease(ctx, releases.Release{Version: "3.0.0", State: releases.StateDraft, CreatedBy: "user:u", CreatedAt: t0}); err != nil {
			return err
		}
		return audited(tx)
	}))
	locked, release, uploaded := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() { // the upload: it has read the draft, and writes once released
		uploaded <- s.Mutate(ctx, func(tx releases.Tx) error {
			if _, err := tx.LockRelease(ctx, "3.0.0"); err != nil {
				return err
			}
			close(locked)
			<-release
			if err := tx.PutReleaseArtifact(ctx, releases.Artifact{Version: "3.0.0", Name: "gpuaas-linux-amd64", OS: "linux", Arch: "amd64",
				Kind: releases.KindCLI, MediaType: "application/octet-stream", Digest: "sha256:" + strings.Repeat("a", 64), Size: 1,
				Location: "blobstore:sha256:" + strings.Repeat("a", 64), UploadedBy: "user:u", UploadedAt: t0}); err != nil {
				return err
			}
			return audited(tx)
		})
	}()
	<-locked
	listed := make(chan int, 1)
	go func() { // the publish
		_ = s.Mutate(ctx, func(tx releases.Tx) error {
			if _, err := tx.LockRelease(ctx, "3.0.0"); err != nil {
				return err
			}
			arts, err := tx.ListReleaseArtifacts(ctx, "3.0.0")
			listed <- len(arts)
			if err != nil {
				return err
			}
			return audited(tx)
		})
	}()
	time.Sleep(100 * time.Millisecond) // room for a publish that does not wait to list too early
	close(release)
	noErr(t, "upload", <-uploaded)
	if n := <-listed; n != 1 {
		t.Fatalf("the publish listed %d artifacts, want the one the upload holding the release wrote", n)
	}
}
