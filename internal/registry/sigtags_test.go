package registry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// sharedLocker records what HoldKeysWith asks of the lock the replicas
// share, and what else was held at the time.
type sharedLocker struct {
	mu     sync.Mutex
	events []string
	fail   error
}

func (l *sharedLocker) log(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *sharedLocker) Hold(_ context.Context, keys ...Key) (func(), error) {
	// The process's own lock of every key is held already.
	local := true
	signatureTags.mu.Lock()
	for _, key := range keys {
		_, held := signatureTags.held[key.Name]
		local = local && held
	}
	signatureTags.mu.Unlock()
	l.log("hold " + joinKeys(keys) + map[bool]string{true: " (local held)", false: " (local free)"}[local])
	if l.fail != nil {
		return nil, l.fail
	}
	return func() { l.log("release " + joinKeys(keys)) }, nil
}

// joinKeys is keys' names, each marked when shared, joined by spaces.
func joinKeys(keys []Key) string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.String()
	}
	return strings.Join(names, " ")
}

func (l *sharedLocker) got() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.events, "; ")
}

// The shared lock is taken after the process's own and released before
// it; a process waits on it once per pair at most, and a failed shared
// hold leaves the process's lock free.
func TestHoldKeysWithShared(t *testing.T) {
	ctx := context.Background()
	shared := &sharedLocker{}
	release, err := HoldKeysWith(ctx, shared, DigestKey("repo-w", "sha256:d"))
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := HoldKeysWith(short, shared, DigestKey("repo-w", "sha256:d")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second holder in the process: %v, want it to wait on the process's lock", err)
	}
	release()
	release() // a second release is a no-op
	if got, want := shared.got(), "hold repo-w@sha256:d (local held); release repo-w@sha256:d"; got != want {
		t.Fatalf("shared lock: %s, want %s", got, want)
	}

	failing := &sharedLocker{fail: errors.New("database down")}
	if _, err := HoldKeysWith(ctx, failing, DigestKey("repo-w", "sha256:d")); err == nil || err.Error() != "database down" {
		t.Fatalf("hold with a failing shared lock: %v", err)
	}
	soon, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	again, err := HoldKeys(soon, DigestKey("repo-w", "sha256:d"))
	if err != nil {
		t.Fatalf("the process's lock was left held by a failed shared hold: %v", err)
	}
	again()
}

// holderGate is a fakeGate with its own KeyHolder.
type holderGate struct {
	fakeGate
	held []string
	fail error
}

func (g *holderGate) HoldKeys(_ context.Context, keys ...Key) (func(), error) {
	g.held = append(g.held, joinKeys(keys))
	if g.fail != nil {
		return nil, g.fail
	}
	return func() {}, nil
}

// A gate that says how to hold a digest's signature tags (the artifacts
// service, with the lock replicas share) is the one the gate holds over
// its check and write, and over a manifest delete's check and delete,
// where it holds the repository's indexes too, shared, in the same one
// hold; one
// that cannot take it answers the gate's failure.
func TestGateHoldsTheGatesKeyHolder(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	h := fakeRegistry(t)
	g := &holderGate{fakeGate: fakeGate{frozen: "sha256-x.sig"}}
	h.gate = g
	if rec := serveGate(h, http.MethodPut, "/v2/a/b/manifests/sha256-"+hex+".sig", "Bearer push"); rec.Code != http.StatusCreated {
		t.Fatalf("PUT = %d %s, want 201", rec.Code, rec.Body)
	}
	if want := "a/b@sha256:" + hex; len(g.held) != 1 || g.held[0] != want {
		t.Fatalf("the gate's holder held %v, want [%s]", g.held, want)
	}
	g.held = nil
	if rec := serveGate(h, http.MethodDelete, "/v2/a/b/manifests/sha256:"+hex, "Bearer delete"); rec.Code != http.StatusAccepted {
		t.Fatalf("DELETE = %d %s, want 202", rec.Code, rec.Body)
	}
	if want := "a/b@sha256:" + hex + " a/b@~indexes (shared)"; len(g.held) != 1 || g.held[0] != want {
		t.Fatalf("a manifest delete held %q, want one hold of %q", g.held, want)
	}
	g.fail = errors.New("database down")
	var failed error
	h.fail = func(w http.ResponseWriter, _ *http.Request, err error) {
		failed = err
		w.WriteHeader(http.StatusInternalServerError)
	}
	if rec := serveGate(h, http.MethodDelete, "/v2/a/b/manifests/sha256-"+hex+".att", "Bearer delete"); rec.Code != http.StatusInternalServerError || failed != g.fail {
		t.Fatalf("DELETE while the hold fails = %d (%v), want the gate's failure", rec.Code, failed)
	}
}

// Keys are held in one order whatever order they are asked in, and in one
// hold of the shared lock: holders of overlapping keys asked in opposite
// orders, in either mode, do not deadlock, and a hold of several keys
// waits for each. A key asked for twice is held once, exclusively when it
// is asked for so once.
func TestHoldKeysWithOverlappingKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, idx := DigestKey("r", "sha256:a"), DigestKey("r", "sha256:b"), IndexesKey("r")
	shared := &sharedLocker{}
	release, err := HoldKeysWith(ctx, shared, b, Shared(idx), b, idx, Shared(b))
	if err != nil {
		t.Fatal(err)
	}
	release()
	if got, want := shared.got(), "hold r@sha256:b r@~indexes (local held); release r@sha256:b r@~indexes"; got != want {
		t.Fatalf("shared lock: %s, want %s", got, want)
	}

	orders := [][]Key{{a, Shared(idx)}, {idx, a}, {b, Shared(idx), Shared(a)}, {Shared(idx), b}}
	var wg sync.WaitGroup
	errs := make(chan error, len(orders))
	for _, keys := range orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				release, err := HoldKeys(ctx, keys...)
				if err != nil {
					errs <- err // ctx's deadline: a deadlock
					return
				}
				release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("holders of overlapping keys in opposite orders: %v", err)
	}

	// A key one hold holds keeps a hold of it and others waiting, and a
	// hold that gave up waiting leaves none of the others held.
	held, err := HoldKeys(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	if _, err := HoldKeysWith(short, shared, b, idx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a hold of a held key: %v, want context deadline exceeded", err)
	}
	soon, stop2 := context.WithTimeout(ctx, 5*time.Second)
	defer stop2()
	other, err := HoldKeys(soon, idx, a)
	if err != nil {
		t.Fatalf("a key a failed hold took before it waited was left held: %v", err)
	}
	other()
	held()
	wantNoKeysLeft(t)
}

// A shared key is held by any number of shared holders at once, and by an
// exclusive one only when none holds it; waiters are served in the order
// they came, so a shared hold that comes after a waiting exclusive one
// waits behind it (a stream of deletes never keeps an index's
// registration out for good), and goes as soon as that exclusive waiter
// gives up.
func TestHoldKeysSharedAndExclusive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	idx := IndexesKey("rw")
	waits := func(what string, keys ...Key) {
		t.Helper()
		short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
		defer stop()
		if release, err := HoldKeys(short, keys...); !errors.Is(err, context.DeadlineExceeded) {
			if err == nil {
				release()
			}
			t.Fatalf("%s: %v, want it to wait (context deadline exceeded)", what, err)
		}
	}
	first, err := HoldKeys(ctx, Shared(idx))
	if err != nil {
		t.Fatal(err)
	}
	second, err := HoldKeys(ctx, DigestKey("rw", "sha256:b"), Shared(idx))
	if err != nil {
		t.Fatalf("a second shared hold beside the first: %v", err)
	}
	waits("an exclusive hold while two shared ones hold the key", idx)
	first()
	waits("an exclusive hold while one shared one holds the key", idx)

	// An exclusive waiter queues the shared holds that come after it.
	got := make(chan error, 1)
	var exclusive func()
	go func() {
		var err error
		exclusive, err = HoldKeys(ctx, idx)
		got <- err
	}()
	waitForWaiters(t, idx.Name, 1)
	waits("a shared hold behind a waiting exclusive one", Shared(idx))
	second()
	if err := <-got; err != nil {
		t.Fatalf("the exclusive hold once the shared ones released: %v", err)
	}
	waits("a shared hold while an exclusive one holds the key", Shared(idx))
	exclusive()

	// An exclusive waiter that gives up lets the shared ones behind it go.
	held, err := HoldKeys(ctx, Shared(idx))
	if err != nil {
		t.Fatal(err)
	}
	gaveUp, stop := context.WithCancel(ctx)
	failed := make(chan error, 1)
	go func() {
		_, err := HoldKeys(gaveUp, idx)
		failed <- err
	}()
	waitForWaiters(t, idx.Name, 1)
	behind := make(chan error, 1)
	var behindRelease func()
	go func() {
		var err error
		behindRelease, err = HoldKeys(ctx, Shared(idx))
		behind <- err
	}()
	waitForWaiters(t, idx.Name, 2)
	stop()
	if err := <-failed; !errors.Is(err, context.Canceled) {
		t.Fatalf("the exclusive hold that gave up: %v", err)
	}
	if err := <-behind; err != nil {
		t.Fatalf("the shared hold behind an exclusive one that gave up: %v", err)
	}
	behindRelease()
	held()
	wantNoKeysLeft(t)
}

// waitForWaiters waits until n holds wait for name in the process's lock.
func waitForWaiters(t *testing.T, name string, n int) {
	t.Helper()
	for range 1000 {
		signatureTags.mu.Lock()
		e := signatureTags.held[name]
		waiting := e != nil && len(e.queue) == n
		signatureTags.mu.Unlock()
		if waiting {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%d holds did not come to wait for %s", n, name)
}

// wantNoKeysLeft fails t when the process's lock still has a key: one
// nobody holds or waits for is dropped.
func wantNoKeysLeft(t *testing.T) {
	t.Helper()
	signatureTags.mu.Lock()
	n := len(signatureTags.held)
	signatureTags.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d keys left behind", n)
	}
}
