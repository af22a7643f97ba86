package registry

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
)

// MaxManifestBytes is the largest manifest the embedded registry accepts
// (distribution's own limit on a manifest PUT's body).
const MaxManifestBytes = 4 << 20

// Key is a key HoldKeysWith holds: exclusively, by one holder at a time,
// unless Shared, when any number of shared holders hold it at once and no
// exclusive one. A digest's signature tags and manifest are written,
// verified and registered under its DigestKey, exclusively; a manifest
// delete holds its repository's IndexesKey shared (Shared), so deletes of
// different manifests run side by side, and an index's registration holds
// it exclusively, so it excludes every one of them.
type Key struct {
	Name   string
	Shared bool
}

// Shared is k held shared.
func Shared(k Key) Key {
	k.Shared = true
	return k
}

// String is k's name, marked when it is held shared.
func (k Key) String() string {
	if k.Shared {
		return k.Name + " (shared)"
	}
	return k.Name
}

// DigestKey is the key of digest in repository: its signature tags
// ("sha256-<hex>.sig", "sha256-<hex>.att", in any case), and the manifest
// itself while it is registered or deleted. The registry's content gate
// holds it from its check that a signature tag is not frozen until the
// registry has written the tag, and artifact verification from reading
// the signature until it has recorded the outcome. So a tag write and a
// verification never interleave: the write is refused as frozen, or the
// verification reads what it wrote.
func DigestKey(repository, digest string) Key { return Key{Name: repository + "@" + digest} }

// IndexesKey is the key of repository's image indexes: registering an
// index holds it from reading the index's manifests until the artifact is
// recorded, and every manifest delete in repository holds it shared from
// its check until the delete, so no delete of a manifest an index
// references falls between the two (the delete's check reads the
// registered indexes), while deletes do not wait on each other.
// Digests are "<algorithm>:<hex>", so it is no DigestKey; its "~" sorts
// it after every digest key of the repository, so a hold takes it last and
// never keeps the whole repository waiting while it waits for a digest
// that one verification or registration holds.
func IndexesKey(repository string) Key { return Key{Name: repository + indexesSuffix} }

const indexesSuffix = "@~indexes"

// LockedLast says k is a repository's key, which every lock of keys takes
// after all digest keys: the process's own lock does by name (see
// IndexesKey), and a lock replicas share, ordering by its own numbers,
// must be told.
func (k Key) LockedLast() bool { return strings.HasSuffix(k.Name, indexesSuffix) }

// HoldKeys holds every key of keys in this process only (HoldKeysWith
// without a lock that replicas share), which is all a server on SQLite
// (one process) needs.
func HoldKeys(ctx context.Context, keys ...Key) (release func(), err error) {
	return HoldKeysWith(ctx, nil, keys...)
}

// HoldKeysWith holds every key of keys at once, each in its mode: the
// process's own lock of each, in sorted order, then locker's (the lock
// replicas that share one database and one registry directory share, nil
// on SQLite) of all of them in one Hold, so a tag write served by one
// replica and a verification run by another exclude each other as they
// do within a process. Every holder takes its keys in the same order, so
// two holds whose keys overlap never each hold a key the other waits for;
// and one Hold of locker takes one of its bounded connections however
// many keys it holds, so holders never each keep a connection while
// waiting for a second (which, with all of them taken, none would get).
// The process's own lock is taken first, so a process waits on locker
// once per exclusive key at most. A key asked for twice is held once,
// exclusively if it is asked for so once. Nothing is held when it fails;
// it waits until ctx is done, and release must be called once the section
// is over (a second call does nothing).
func HoldKeysWith(ctx context.Context, locker SignatureTagLocker, keys ...Key) (release func(), err error) {
	keys = SortedKeys(keys)
	locals := make([]func(), 0, len(keys))
	unlock := func() {
		for i := len(locals) - 1; i >= 0; i-- {
			locals[i]()
		}
	}
	for _, key := range keys {
		local, err := signatureTags.lock(ctx, key)
		if err != nil {
			unlock()
			return nil, err
		}
		locals = append(locals, local)
	}
	remote := func() {}
	if locker != nil {
		if remote, err = locker.Hold(ctx, keys...); err != nil {
			unlock()
			return nil, err
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			remote()
			unlock()
		})
	}, nil
}

// Waiting is how many holds in this process wait for key's name now, in
// either mode: what a test (or a stuck-request investigation) asks to
// know that a request has reached a key and queued behind its holder.
func Waiting(key Key) int {
	signatureTags.mu.Lock()
	defer signatureTags.mu.Unlock()
	if e := signatureTags.held[key.Name]; e != nil {
		return len(e.queue)
	}
	return 0
}

// SortedKeys is keys sorted by name, each name once: the order every
// holder takes its keys in. A name asked for both shared and exclusively
// is kept exclusive (a holder that locked it twice would wait for itself).
func SortedKeys(keys []Key) []Key {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b Key) int {
		// Exclusive first, so Compact keeps it.
		return cmp.Or(cmp.Compare(a.Name, b.Name), compareBool(a.Shared, b.Shared))
	})
	return slices.CompactFunc(keys, func(a, b Key) bool { return a.Name == b.Name })
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// SignatureTagLocker is a lock on keys shared by every process that serves
// one registry: each key held by one exclusive holder, or by any number
// of shared ones, at a time, whichever process they are in.
type SignatureTagLocker interface {
	// Hold waits until every key of keys can be held in its mode (each
	// name once in keys) and holds them all, or until ctx is done
	// (holding none). release must be called once, when the section is
	// over.
	Hold(ctx context.Context, keys ...Key) (release func(), err error)
}

// KeyHolder is an optional extension of ContentGate: the hold the gate's
// sections run under (the check and write of a signature or attestation
// tag, the check and delete of a manifest), which must be the one
// verification and registration hold. A gate without it is served under
// HoldKeys.
type KeyHolder interface {
	HoldKeys(ctx context.Context, keys ...Key) (release func(), err error)
}

var signatureTags = keyedLock{held: map[string]*keyedEntry{}}

// keyedLock is a set of read-write locks created on demand per name,
// waited on with a context, and dropped when nobody holds or waits for
// them. Waiters are served in the order they came: a shared holder that
// comes after a waiting exclusive one waits behind it, so a stream of
// deletes never keeps an index's registration waiting for good.
type keyedLock struct {
	mu   sync.Mutex
	held map[string]*keyedEntry
}

type keyedEntry struct {
	shared    int  // shared holders
	exclusive bool // an exclusive holder
	queue     []*keyWaiter
	users     int // holders and waiters
}

// keyWaiter is a hold that waits for its key; ready is closed when it is
// granted.
type keyWaiter struct {
	shared bool
	ready  chan struct{}
}

// free says whether a hold in mode shared could be granted now, waiters
// aside.
func (e *keyedEntry) free(shared bool) bool {
	return !e.exclusive && (shared || e.shared == 0)
}

func (e *keyedEntry) grant(shared bool) {
	if shared {
		e.shared++
	} else {
		e.exclusive = true
	}
}

// wake grants the waiters at the head of the queue that can be granted.
func (e *keyedEntry) wake() {
	for len(e.queue) > 0 && e.free(e.queue[0].shared) {
		w := e.queue[0]
		e.queue = e.queue[1:]
		e.grant(w.shared)
		close(w.ready)
	}
}

func (k *keyedLock) lock(ctx context.Context, key Key) (func(), error) {
	k.mu.Lock()
	e := k.held[key.Name]
	if e == nil {
		e = &keyedEntry{}
		k.held[key.Name] = e
	}
	e.users++
	// unhold gives the key back and leave drops e once nobody holds or
	// waits for it, both with k.mu held.
	unhold := func() {
		if key.Shared {
			e.shared--
		} else {
			e.exclusive = false
		}
		e.wake()
	}
	leave := func() {
		if e.users--; e.users == 0 {
			delete(k.held, key.Name)
		}
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			k.mu.Lock()
			unhold()
			leave()
			k.mu.Unlock()
		})
	}
	if len(e.queue) == 0 && e.free(key.Shared) {
		e.grant(key.Shared)
		k.mu.Unlock()
		return release, nil
	}
	w := &keyWaiter{shared: key.Shared, ready: make(chan struct{})}
	e.queue = append(e.queue, w)
	k.mu.Unlock()
	select {
	case <-w.ready:
		return release, nil
	case <-ctx.Done():
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-w.ready:
		// Granted as ctx ended: given back, as nothing is held when
		// the hold fails.
		unhold()
	default:
		e.queue = slices.DeleteFunc(e.queue, func(q *keyWaiter) bool { return q == w })
		// Waiters behind it may be grantable now (shared ones behind
		// an exclusive one that gave up).
		e.wake()
	}
	leave()
	return nil, ctx.Err()
}
