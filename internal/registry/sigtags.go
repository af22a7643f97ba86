package registry

import (
	"context"
	"sync"
)

// MaxManifestBytes is the largest manifest the embedded registry accepts
// (distribution's own limit on a manifest PUT's body).
const MaxManifestBytes = 4 << 20

// HoldSignatureTags serialises, within this process, the writes of the
// signature and attestation tags of digest in repository
// ("sha256-<hex>.sig", "sha256-<hex>.att", in any case) with whatever else
// holds the same pair: the content gate holds it from its check that the
// tag is not frozen until the registry has written the tag, and artifact
// verification from reading the signature until it has recorded the
// outcome. So a tag write and a verification never interleave: the write
// is refused as frozen, or the verification reads what it wrote.
//
// The lock is one process's. Replicas that share one registry directory
// (PostgreSQL) each hold their own, so a write served by one replica and a
// verification run by another are not serialised by it: what is left
// between them is the moment from the gate's check to the registry's write
// (the gate checks only once the whole body is in), not the upload. A
// PostgreSQL advisory lock would close it, held in a transaction of its
// own over the same sections; it is not taken here.
//
// It waits for the pair until ctx is done; release must be called once the
// section is over.
func HoldSignatureTags(ctx context.Context, repository, digest string) (release func(), err error) {
	return signatureTags.lock(ctx, repository+"@"+digest)
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
