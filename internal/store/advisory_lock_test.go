package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// twoReplicas opens two pools on one PostgreSQL database, as two replicas
// of the server would, and returns the signature tag lock of each.
func twoReplicas(t *testing.T) (a, b registry.SignatureTagLocker, dbA *store.DB) {
	t.Helper()
	url := storetest.URL(t, store.Postgres)
	var locks [2]registry.SignatureTagLocker
	var dbs [2]*store.DB
	for i := range locks {
		db, err := store.Open(context.Background(), url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		if locks[i] = store.SignatureTagLocks(db); locks[i] == nil {
			t.Fatal("no signature tag lock on PostgreSQL")
		}
		dbs[i] = db
	}
	return locks[0], locks[1], dbs[0]
}

// A digest's signature tags held by one replica are held for every other:
// while pool A holds a key, pool B waits for it (until its context ends,
// or until A releases it), and other keys do not wait.
func TestSignatureTagLocksAcrossReplicas(t *testing.T) {
	t.Parallel()
	a, b, _ := twoReplicas(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := registry.DigestKey("app/demo", "sha256:"+newID())
	releaseA, err := a.Hold(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	if release, err := b.Hold(short, key); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			release()
		}
		t.Fatalf("pool B's hold while pool A held the key: %v, want context deadline exceeded", err)
	}
	other, stop2 := context.WithTimeout(ctx, 5*time.Second)
	defer stop2()
	releaseOther, err := b.Hold(other, registry.DigestKey("app/demo", "sha256:"+newID()))
	if err != nil {
		t.Fatalf("pool B's hold of another key waited on pool A's: %v", err)
	}
	releaseOther()

	got := make(chan error, 1)
	var releaseB func()
	go func() {
		var err error
		releaseB, err = b.Hold(ctx, key)
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("pool B took the key while pool A held it (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	releaseA()
	releaseA() // a second release is a no-op
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("pool B after pool A released: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pool B did not get the key after pool A released it")
	}
	releaseB()
	// Nothing holds it now: A takes it at once.
	again, stop3 := context.WithTimeout(ctx, 5*time.Second)
	defer stop3()
	releaseA, err = a.Hold(again, key)
	if err != nil {
		t.Fatalf("pool A after pool B released: %v", err)
	}
	releaseA()
}

// A wait its caller gave up on leaves nothing behind: its session is no
// longer queued for the lock (a session only disconnected would be, and
// would take the lock when it is freed), and once the holder releases it
// the next hold gets it at once.
func TestSignatureTagLockCancelledWait(t *testing.T) {
	t.Parallel()
	a, b, db := twoReplicas(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := registry.DigestKey("app/demo", "sha256:"+newID())
	releaseA, err := a.Hold(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := b.Hold(short, key)
		stop()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait %d: %v, want context deadline exceeded", i, err)
		}
		// A cancelled wait is out of the queue when the hold returns,
		// not whenever the server gets to a dropped connection.
		held, waiting, err := store.SignatureTagLockStateForTest(ctx, db, key.Name)
		if err != nil {
			t.Fatal(err)
		}
		if held != 1 || waiting != 0 {
			t.Fatalf("after cancelled wait %d: %d sessions hold the key and %d wait for it, want 1 and 0", i, held, waiting)
		}
	}
	releaseA()
	next, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	releaseB, err := b.Hold(next, key)
	if err != nil {
		t.Fatalf("a hold after the cancelled waits and the release: %v", err)
	}
	releaseB()
	if held, waiting, err := store.SignatureTagLockStateForTest(ctx, db, key.Name); err != nil || held != 0 || waiting != 0 {
		t.Fatalf("after every release: %d sessions hold the key and %d wait (%v), want none", held, waiting, err)
	}
}

// SQLite is one process: its own lock is the whole lock.
func TestSignatureTagLocksSQLite(t *testing.T) {
	if l := store.SignatureTagLocks(storetest.Open(t, store.SQLite)); l != nil {
		t.Fatalf("SQLite has a shared signature tag lock: %T", l)
	}
}

// The keys of one hold are locked on one connection, taking one slot: with
// a single slot, a hold of several keys is granted (none waits for a
// second slot that its own first one keeps taken), and holds whose keys
// overlap, asked in opposite orders by two replicas at once, all end (the
// keys are locked in one order; in opposite orders PostgreSQL would find
// the two sessions deadlocked, or both would wait forever).
func TestSignatureTagLocksMultiKeyHold(t *testing.T) {
	t.Parallel()
	url := storetest.URL(t, store.Postgres)
	var locks [2]registry.SignatureTagLocker
	var db *store.DB
	for i := range locks {
		d, err := store.Open(context.Background(), url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		locks[i], db = store.SignatureTagLocksWithSlotsForTest(d, 1), d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	repo := "app/demo-" + newID()
	keys := []registry.Key{registry.DigestKey(repo, "sha256:b"), registry.IndexesKey(repo), registry.DigestKey(repo, "sha256:a")}
	release, err := locks[0].Hold(ctx, keys...)
	if err != nil {
		t.Fatalf("a hold of 3 keys with one slot: %v", err)
	}
	for _, key := range keys {
		if held, waiting, err := store.SignatureTagLockStateForTest(ctx, db, key.Name); err != nil || held != 1 || waiting != 0 {
			t.Fatalf("%s while held: %d sessions hold it and %d wait (%v), want 1 and 0", key, held, waiting, err)
		}
	}
	// The one slot is taken: another hold of this replica waits for it.
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if r, err := locks[0].Hold(short, registry.DigestKey("app/other", "sha256:"+newID())); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			r()
		}
		t.Fatalf("a second hold while the only slot was taken: %v, want context deadline exceeded", err)
	}
	release()
	for _, key := range keys {
		if held, waiting, err := store.SignatureTagLockStateForTest(ctx, db, key.Name); err != nil || held != 0 || waiting != 0 {
			t.Fatalf("%s after the release: %d sessions hold it and %d wait (%v), want none", key, held, waiting, err)
		}
	}

	orders := [][]registry.Key{{keys[0], registry.Shared(keys[1])}, {keys[1], keys[2], registry.Shared(keys[0])}}
	errs := make(chan error, 2)
	for i, order := range orders {
		go func() {
			for range 50 {
				release, err := locks[i].Hold(ctx, order...)
				if err != nil {
					errs <- err
					return
				}
				release()
			}
			errs <- nil
		}()
	}
	for range orders {
		if err := <-errs; err != nil {
			t.Fatalf("holds of overlapping keys in opposite orders: %v", err)
		}
	}
}

// A shared key is held by any number of shared holds at once, across
// sessions (two replicas), and by an exclusive one only when no other
// holds it: an exclusive hold waits for the shared ones, and a shared one
// for an exclusive one. A hold that asks for one key both ways holds it
// once, exclusively.
func TestSignatureTagLocksSharedAcrossReplicas(t *testing.T) {
	t.Parallel()
	a, b, db := twoReplicas(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := registry.IndexesKey("app/demo-" + newID())
	wantModes := func(what string, want ...string) {
		t.Helper()
		got, err := store.SignatureTagLockModesForTest(ctx, db, key.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: the key is held %v, want %v", what, got, want)
		}
	}
	waits := func(what string, l registry.SignatureTagLocker, k registry.Key) {
		t.Helper()
		short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
		defer stop()
		if release, err := l.Hold(short, k); !errors.Is(err, context.DeadlineExceeded) {
			if err == nil {
				release()
			}
			t.Fatalf("%s: %v, want context deadline exceeded", what, err)
		}
	}
	releaseA, err := a.Hold(ctx, registry.Shared(key))
	if err != nil {
		t.Fatal(err)
	}
	soon, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	releaseB, err := b.Hold(soon, registry.Shared(key))
	if err != nil {
		t.Fatalf("pool B's shared hold while pool A held the key shared: %v", err)
	}
	wantModes("two shared holds", "ShareLock", "ShareLock")
	waits("pool B's exclusive hold while both held it shared", b, key)
	releaseA()
	waits("pool A's exclusive hold while pool B held it shared", a, key)
	releaseB()
	wantModes("after the shared holds released")

	releaseA, err = a.Hold(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	waits("pool B's shared hold while pool A held the key exclusively", b, registry.Shared(key))
	releaseA()

	both, err := b.Hold(ctx, registry.Shared(key), key, registry.Shared(key))
	if err != nil {
		t.Fatalf("a hold of one key both shared and exclusively: %v", err)
	}
	wantModes("a hold of one key both ways", "ExclusiveLock")
	waits("pool A's shared hold while pool B held the key exclusively", a, registry.Shared(key))
	both()
	wantModes("after every release")
}

// A delete holds its digest and, shared, its repository's key. While it
// waits for a digest another replica holds (a verification), it holds no
// lock of the repository yet: an index's registration, which takes the
// repository's key exclusively, does not wait for it. The keys' lock
// numbers order digests by their hash; the repository's key comes last
// whatever its hash, so eight repositories cover both orders of the
// hashes (all eight in one order: one in 256).
func TestSignatureTagLocksTakeARepositoryKeyLast(t *testing.T) {
	t.Parallel()
	a, b, db := twoReplicas(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 8 {
		repo := fmt.Sprintf("app/order-%d", i)
		digest := registry.DigestKey(repo, "sha256:"+strings.Repeat("ab", 32))
		verification, err := a.Hold(ctx, digest)
		if err != nil {
			t.Fatal(err)
		}
		deleted := make(chan error, 1)
		go func() {
			release, err := b.Hold(ctx, digest, registry.Shared(registry.IndexesKey(repo)))
			if err == nil {
				release()
			}
			deleted <- err
		}()
		for {
			if _, waiting, err := store.SignatureTagLockStateForTest(ctx, db, digest.Name); err != nil {
				t.Fatal(err)
			} else if waiting == 1 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		short, stop := context.WithTimeout(ctx, 2*time.Second)
		registration, err := a.Hold(short, registry.IndexesKey(repo))
		stop()
		if err != nil {
			t.Fatalf("%s: an index registration waited for a delete that waits for a digest (%v)", repo, err)
		}
		registration()
		verification()
		if err := <-deleted; err != nil {
			t.Fatal(err)
		}
	}
}
