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

// sharedLocker records what HoldSignatureTagsWith asks of the lock the
// replicas share, and what else was held at the time.
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

func (l *sharedLocker) Hold(_ context.Context, keys ...string) (func(), error) {
	// The process's own lock of every key is held already.
	local := true
	signatureTags.mu.Lock()
	for _, key := range keys {
		_, held := signatureTags.held[key]
		local = local && held
	}
	signatureTags.mu.Unlock()
	l.log("hold " + strings.Join(keys, " ") + map[bool]string{true: " (local held)", false: " (local free)"}[local])
	if l.fail != nil {
		return nil, l.fail
	}
	return func() { l.log("release " + strings.Join(keys, " ")) }, nil
}

func (l *sharedLocker) got() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.events, "; ")
}

// The shared lock is taken after the process's own and released before
// it; a process waits on it once per pair at most, and a failed shared
// hold leaves the process's lock free.
func TestHoldSignatureTagsWithShared(t *testing.T) {
	ctx := context.Background()
	shared := &sharedLocker{}
	release, err := HoldSignatureTagsWith(ctx, shared, "repo-w", "sha256:d")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := HoldSignatureTagsWith(short, shared, "repo-w", "sha256:d"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second holder in the process: %v, want it to wait on the process's lock", err)
	}
	release()
	release() // a second release is a no-op
	if got, want := shared.got(), "hold repo-w@sha256:d (local held); release repo-w@sha256:d"; got != want {
		t.Fatalf("shared lock: %s, want %s", got, want)
	}

	failing := &sharedLocker{fail: errors.New("database down")}
	if _, err := HoldSignatureTagsWith(ctx, failing, "repo-w", "sha256:d"); err == nil || err.Error() != "database down" {
		t.Fatalf("hold with a failing shared lock: %v", err)
	}
	soon, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	again, err := HoldSignatureTags(soon, "repo-w", "sha256:d")
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

func (g *holderGate) HoldKeys(_ context.Context, keys ...string) (func(), error) {
	g.held = append(g.held, strings.Join(keys, " "))
	if g.fail != nil {
		return nil, g.fail
	}
	return func() {}, nil
}

// A gate that says how to hold a digest's signature tags (the artifacts
// service, with the lock replicas share) is the one the gate holds over
// its check and write, and over a manifest delete's check and delete,
// where it holds the repository's indexes too, in the same one hold; one
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
	if want := "a/b@sha256:" + hex + " a/b@~indexes"; len(g.held) != 1 || g.held[0] != want {
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
// orders do not deadlock, and a hold of several keys waits for each.
func TestHoldKeysWithOverlappingKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shared := &sharedLocker{}
	release, err := HoldKeysWith(ctx, shared, "r@sha256:b", "r@~indexes", "r@sha256:b")
	if err != nil {
		t.Fatal(err)
	}
	release()
	if got, want := shared.got(), "hold r@sha256:b r@~indexes (local held); release r@sha256:b r@~indexes"; got != want {
		t.Fatalf("shared lock: %s, want %s", got, want)
	}

	orders := [][]string{{"r@sha256:a", "r@~indexes"}, {"r@~indexes", "r@sha256:a"}, {"r@sha256:b", "r@~indexes", "r@sha256:a"}}
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
	held, err := HoldKeys(ctx, "r@sha256:b")
	if err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	if _, err := HoldKeysWith(short, shared, "r@sha256:b", "r@~indexes"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a hold of a held key: %v, want context deadline exceeded", err)
	}
	soon, stop2 := context.WithTimeout(ctx, 5*time.Second)
	defer stop2()
	other, err := HoldKeys(soon, "r@~indexes", "r@sha256:a")
	if err != nil {
		t.Fatalf("a key a failed hold took before it waited was left held: %v", err)
	}
	other()
	held()
	wantNoKeysLeft(t)
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
