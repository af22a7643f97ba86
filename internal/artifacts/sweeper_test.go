package artifacts

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/blobstore"
	"github.com/gpuaas/gpuaas/internal/clock"
)

// An upload nobody touched for longer than any publish intent lives is
// removed by the sweeper; one still inside that window is kept.
func TestUploadSweeperRemovesAbandonedUploads(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC))
	blobs, err := blobstore.New(t.TempDir(), blobstore.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := blobstore.Key{ProjectID: "p1", App: "a", Version: "1.0.0", Name: "weights"}
	old, err := blobs.Begin(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(AbandonedUploadAge - MaxIntentTTL + time.Minute)
	recent, err := blobs.Begin(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(MaxIntentTTL)
	s := New(Deps{Blobs: blobs, Now: clk.Now})
	w := s.UploadSweeper()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.WaitRuns(wait, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.Status(ctx, old); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("upload idle for %v is still there: %v", AbandonedUploadAge+time.Minute, err)
	}
	if _, err := blobs.Status(ctx, recent); err != nil {
		t.Fatalf("upload idle for %v was removed: %v", MaxIntentTTL, err)
	}
	if (&Service{}).UploadSweeper() != nil {
		t.Fatal("a server without a blob store got an upload sweeper")
	}
}
