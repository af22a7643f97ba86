package registry

import (
	"context"
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
// the key "<repository>@<digest>": replicas that share one database and one
// registry directory (PostgreSQL) pass the database's lock, so a tag write
// served by one replica and a verification run by another exclude each
// other as they do within a process. The process's own lock is taken
// first, so a process waits on shared once per pair at most; nil shared is
// HoldSignatureTags.
func HoldSignatureTagsWith(ctx context.Context, shared SignatureTagLocker, repository, digest string) (release func(), err error) {
	key := repository + "@" + digest
	local, err := signatureTags.lock(ctx, key)
	if err != nil || shared == nil {
		return local, err
	}
	remote, err := shared.Hold(ctx, key)
	if err != nil {
		local()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			remote()
			local()
		})
	}, nil
}

// SignatureTagLocker is a lock on keys shared by every process that serves
// one registry: held by one holder at a time, whichever process it is in.
type SignatureTagLocker interface {
	// Hold waits until key is free or ctx is done; release must be called
	// once, when the section is over.
	Hold(ctx context.Context, key string) (release func(), err error)
}

// SignatureTagHolder is an optional extension of ContentGate: the hold the
// gate's check and write of a signature or attestation tag run under,
// which must be the one verification holds. A gate without it is served
// under HoldSignatureTags.
type SignatureTagHolder interface {
	HoldSignatureTags(ctx context.Context, repository, digest string) (release func(), err error)
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
