package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// On PostgreSQL the server holds a digest's signature tags (the registry's
// content gate, through the artifacts service, as verification does) under
// the advisory lock every replica takes: a hold by another session of the
// database (another replica's) keeps it waiting, and its own hold keeps the
// other session waiting.
func TestSignatureTagsHeldAcrossReplicas(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	holder, ok := s.App.API.Artifacts.RegistryAuthorizer().(registry.KeyHolder)
	if !ok {
		t.Fatal("the registry's content gate has no signature tag holder of its own")
	}
	other := store.SignatureTagLocks(s.App.DB) // another replica: its own sessions of the database
	repo, digest := "p/demo/runtime", "sha256:"+time.Now().Format("20060102150405.000000000")
	releaseOther, err := other.Hold(ctx, registry.DigestKey(repo, digest))
	if err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	if release, err := holder.HoldKeys(short, registry.DigestKey(repo, digest)); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			release()
		}
		t.Fatalf("the server held a digest's signature tags another replica held: %v, want context deadline exceeded", err)
	}
	releaseOther()
	release, err := holder.HoldKeys(ctx, registry.DigestKey(repo, digest))
	if err != nil {
		t.Fatal(err)
	}
	short2, stop2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop2()
	if r, err := other.Hold(short2, registry.DigestKey(repo, digest)); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			r()
		}
		t.Fatalf("another replica held a digest's signature tags the server held: %v, want context deadline exceeded", err)
	}
	release()
}
