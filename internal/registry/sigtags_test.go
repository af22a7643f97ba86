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

func (l *sharedLocker) Hold(_ context.Context, key string) (func(), error) {
	// The process's own lock is held already.
	signatureTags.mu.Lock()
	_, local := signatureTags.held[key]
	signatureTags.mu.Unlock()
	l.log("hold " + key + map[bool]string{true: " (local held)", false: " (local free)"}[local])
	if l.fail != nil {
		return nil, l.fail
	}
	return func() { l.log("release " + key) }, nil
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

// holderGate is a fakeGate with its own SignatureTagHolder.
type holderGate struct {
	fakeGate
	held []string
	fail error
}

func (g *holderGate) HoldSignatureTags(_ context.Context, repository, digest string) (func(), error) {
	g.held = append(g.held, repository+"@"+digest)
	if g.fail != nil {
		return nil, g.fail
	}
	return func() {}, nil
}

// A gate that says how to hold a digest's signature tags (the artifacts
// service, with the lock replicas share) is the one the gate holds over
// its check and write; one that cannot take it answers the gate's failure.
func TestGateHoldsTheGatesSignatureTagHolder(t *testing.T) {
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
