// Package ratelimit is the server's one keyed token bucket: a
// golang.org/x/time/rate limiter per key (a client address, an instance, a
// node), in a table of bounded size. It lives in one process: each replica
// keeps its own buckets, so behind N replicas a key may spend up to N times
// the rate, and a restart refills every bucket.
package ratelimit

import (
	"container/list"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Keyed is a token bucket per key. The table holds at most its maxKeys
// buckets; a new key past that forgets the least recently used one, found
// in constant time from a recency list, so a full table costs an insert no
// more than an empty one. A forgotten key starts again with a full bucket:
// with keys that must first be authenticated (an instance, a node) the
// table never fills in practice, and with client addresses the key
// forgotten is the one quiet the longest, not one that keeps asking.
type Keyed struct {
	limit   rate.Limit
	burst   int
	maxKeys int
	now     func() time.Time

	mu   sync.Mutex
	keys map[string]*list.Element // → *bucket in lru
	lru  list.List                // most recently used at the front
}

type bucket struct {
	key string
	lim *rate.Limiter
}

// New returns a limiter of perSecond tokens a second and bursts of burst
// per key, tracking at most maxKeys keys; nil (no limit) for a rate of 0
// or less. A nil *Keyed takes everything.
func New(perSecond float64, burst, maxKeys int) *Keyed {
	if perSecond <= 0 {
		return nil
	}
	return &Keyed{limit: rate.Limit(perSecond), burst: burst, maxKeys: max(maxKeys, 1), keys: map[string]*list.Element{}}
}

// WithClock makes the limiter read now instead of the wall clock (tests).
func (k *Keyed) WithClock(now func() time.Time) *Keyed {
	k.now = now
	return k
}

// Rate is the tokens a second one key regains.
func (k *Keyed) Rate() float64 { return float64(k.limit) }

// Burst is the most tokens one key may spend at once.
func (k *Keyed) Burst() int { return k.burst }

// Len is how many keys the table tracks now.
func (k *Keyed) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys)
}

// Take spends n tokens of key's bucket and answers 0, or spends nothing
// and answers how long until n tokens would be there (the Retry-After of
// the refusal). n larger than the burst is never admissible: the answer is
// rate.InfDuration, and a caller should refuse such a request as too
// large, not as too early.
func (k *Keyed) Take(key string, n int) time.Duration {
	if k == nil {
		return 0
	}
	return k.TakeAt(key, n, k.clock())
}

// clock reads the wall clock unless a test handed one in: a
// process-local bucket that a stopped test clock would never refill.
func (k *Keyed) clock() time.Time {
	if k.now != nil {
		return k.now()
	}
	return time.Now()
}

// TakeAt is Take at the time now.
func (k *Keyed) TakeAt(key string, n int, now time.Time) time.Duration {
	if k == nil {
		return 0
	}
	if n > k.burst {
		return rate.InfDuration
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var b *bucket
	if e, ok := k.keys[key]; ok {
		k.lru.MoveToFront(e)
		b = e.Value.(*bucket)
	} else {
		if len(k.keys) >= k.maxKeys {
			oldest := k.lru.Back()
			delete(k.keys, oldest.Value.(*bucket).key)
			k.lru.Remove(oldest)
		}
		b = &bucket{key: key, lim: rate.NewLimiter(k.limit, k.burst)}
		k.keys[key] = k.lru.PushFront(b)
	}
	r := b.lim.ReserveN(now, n)
	wait := r.DelayFrom(now)
	if wait > 0 {
		r.CancelAt(now) // a refused request spends nothing
	}
	return wait
}

// RetryAfterSeconds is a wait as the whole seconds of a Retry-After
// header: rounded up, and at least 1.
func RetryAfterSeconds(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}
