package registry

import (
	"context"
	"slices"
	"sync"
)

// MaxManifestBytes is the largest manifest the embedded registry accepts
// (distribution's own limit on a manifest PUT's body).
const MaxManifestBytes = 4 << 20

// HoldSignatureTags serialises the writes of the signature and attestation
// tags of digest in repository ("sha256-<hex>.sig", "sha256-<hex>.att", in
// any case) with whatever else holds the same pair: the content gate holds
// it from its check that the tag is not frozen until the registry has
// written the tag, and artifact verification from reading the signature
// until it has recorded the outcome. So a tag write and a verification
// never interleave: the write is refused as frozen, or the verification
// reads what it wrote.
//
// HoldSignatureTags holds the pair in this process only, which is all a
// server on SQLite (one process) needs; HoldSignatureTagsWith adds a lock
// that replicas share.
//
// It waits for the pair until ctx is done; release must be called once the
// section is over.
func HoldSignatureTags(ctx context.Context, repository, digest string) (release func(), err error) {
	return HoldSignatureTagsWith(ctx, nil, repository, digest)
}

// HoldSignatureTagsWith is HoldSignatureTags with shared taken too, under
// the key "<repository>@<digest>" (DigestKey): replicas that share one
// database and one registry directory (PostgreSQL) pass the database's
// lock, so a tag write served by one replica and a verification run by
// another exclude each other as they do within a process. nil shared is
// HoldSignatureTags.
func HoldSignatureTagsWith(ctx context.Context, shared SignatureTagLocker, repository, digest string) (release func(), err error) {
	return HoldKeysWith(ctx, shared, DigestKey(repository, digest))
}

// DigestKey is the key HoldKeysWith holds for digest in repository: its
// signature tags, and the manifest itself while it is registered or
// deleted.
func DigestKey(repository, digest string) string { return repository + "@" + digest }

// IndexesKey is the key of repository's image indexes: registering an
// index holds it from reading the index's manifests until the artifact is
// recorded, and every manifest delete in repository holds it from its
// check until the delete, so no delete of a manifest an index references
// falls between the two (the delete's check reads the registered indexes).
// Digests are "<algorithm>:<hex>", so it is no DigestKey; its "~" sorts
// it after every digest key of the repository, so a hold takes it last and
// never keeps the whole repository waiting while it waits for a digest
// that one verification or registration holds.
func IndexesKey(repository string) string { return repository + "@~indexes" }

// HoldKeys holds every key of keys in this process only (HoldKeysWith
// without a shared lock).
func HoldKeys(ctx context.Context, keys ...string) (release func(), err error) {
	return HoldKeysWith(ctx, nil, keys...)
}

// HoldKeysWith holds every key of keys at once: the process's own lock of
// each, in sorted order, then shared's of all of them in one Hold. Every
// holder takes its keys in the same order, so two holds whose keys overlap
// never each hold a key the other waits for; and one Hold of the shared
// lock takes one of its bounded connections however many keys it holds,
// so holders never each keep a connection while waiting for a second
// (which, with all of them taken, none would get). The process's own lock
// is taken first, so a process waits on shared once per key at most.
// Nothing is held when it fails; release must be called once the section
// is over (a second call does nothing).
func HoldKeysWith(ctx context.Context, shared SignatureTagLocker, keys ...string) (release func(), err error) {
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
	if shared != nil {
		if remote, err = shared.Hold(ctx, keys...); err != nil {
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

// SortedKeys is keys sorted, each once: the order every holder takes its
// keys in.
func SortedKeys(keys []string) []string {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	return slices.Compact(keys)
}

// SignatureTagLocker is a lock on keys shared by every process that serves
// one registry: each key held by one holder at a time, whichever process
// it is in.
type SignatureTagLocker interface {
	// Hold waits until every key of keys is free and holds them all, or
	// until ctx is done (holding none). release must be called once,
	// when the section is over.
	Hold(ctx context.Context, keys ...string) (release func(), err error)
}

// KeyHolder is an optional extension of ContentGate: the hold the gate's
// sections run under (the check and write of a signature or attestation
// tag, the check and delete of a manifest), which must be the one
// verification and registration hold. A gate without it is served under
// HoldKeys.
type KeyHolder interface {
	HoldKeys(ctx context.Context, keys ...string) (release func(), err error)
}

var signatureTags = keyedLock{held: map[string]*keyedEntry{}}

// keyedLock is a set of mutexes created on demand per key, waited on with a
// context, and dropped when nobody holds or waits for them.
type keyedLock struct {
	mu   sync.Mutex
	held map[string]*keyedEntry
}

type keyedEntry struct {
	token chan struct{} // a token in the channel: held
	users int           // holders and waiters
}

func (k *keyedLock) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	e := k.held[key]
	if e == nil {
		e = &keyedEntry{token: make(chan struct{}, 1)}
		k.held[key] = e
	}
	e.users++
	k.mu.Unlock()
	done := func() {
		k.mu.Lock()
		if e.users--; e.users == 0 {
			delete(k.held, key)
		}
		k.mu.Unlock()
	}
	select {
	case e.token <- struct{}{}:
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-e.token
			done()
		})
	}, nil
}
