package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/gpuaas/gpuaas/internal/registry"
)

// SignatureTagLocks is the lock the replicas on db share on registry keys
// (registry.HoldKeysWith: a digest's signature tags and manifest, a
// repository's indexes): a session-level PostgreSQL advisory lock per key,
// shared (pg_advisory_lock_shared) for a shared key, held on a connection
// of db's pool kept out of it until release. On SQLite, a single process, it is nil: the
// process's own lock is the whole lock.
func SignatureTagLocks(db *DB) registry.SignatureTagLocker {
	if db.dialect != Postgres {
		return nil
	}
	n := 4 // an unbounded pool
	if open := db.sql.Stats().MaxOpenConnections; open > 0 {
		n = max(1, open/4)
	}
	return &advisoryLocks{db: db, slots: make(chan struct{}, n)}
}

// signatureTagLockKey is the advisory lock of key: the first 8 bytes of
// its name's SHA-256 with the top bit set, so a negative one-key lock.
// Schema changes hold a positive one-key lock (migrateLock) and placements
// the two-key form (placementLockClass), which PostgreSQL keeps apart from
// the one-key form: the negative one-key locks are the registry's alone.
// The next bit is set for a key locked last (a repository's, see
// registry.Key.LockedLast) and clear for every other, so the order of the
// numbers, the one order Hold locks in, takes a repository's key after
// every digest key, as the process's own lock does: a delete waiting for
// a digest that another replica's verification holds then waits without
// holding its repository's key, which an index's registration (and, queued
// behind that, every other delete in the repository) would wait for. Two
// keys whose 62 bits collide only wait on each other (and one hold of both
// takes the lock once).
func signatureTagLockKey(key registry.Key) int64 {
	sum := sha256.Sum256([]byte(key.Name))
	n := binary.BigEndian.Uint64(sum[:8])&^(1<<62) | 1<<63
	if key.LockedLast() {
		n |= 1 << 62
	}
	return int64(n)
}

// advisoryCancelGrace is how long a wait that its caller gave up on is
// left to end by the server's cancel before its connection is dropped.
const advisoryCancelGrace = 5 * time.Second

// advisoryLocks holds advisory locks on connections of db's pool. Each
// hold, waiting or granted, keeps one connection; slots bounds them to a
// quarter of the pool, so holders that query the database while they hold
// (verification records its outcome) always find a connection.
type advisoryLocks struct {
	db    *DB
	slots chan struct{}
}

// Hold waits for the locks of keys until ctx is done, each in its mode,
// all of them on one connection, so a hold takes one slot however many
// keys it holds: a holder never keeps a slot while it waits for a second
// one, which, all slots taken by such holders, none would get. The keys
// are locked in the order of their lock numbers, so two holds whose keys
// overlap never each hold a lock the other waits for (in the order of the
// keys, two keys whose numbers collide could be locked in different
// orders by two holders, which PostgreSQL ends as a deadlock); one lock
// per number, exclusive when any key of that number is (a session that
// held a number shared and waited for it exclusively would wait for
// itself). The caller's process holds its own lock on each key first
// (registry.HoldKeysWith), so a process has one connection at most per
// exclusively held key; shared holders of one key each have their own.
func (l *advisoryLocks) Hold(ctx context.Context, keys ...registry.Key) (release func(), err error) {
	locks := make([]advisoryKey, len(keys))
	for i, key := range keys {
		locks[i] = advisoryKey{key, signatureTagLockKey(key)}
	}
	slices.SortFunc(locks, func(a, b advisoryKey) int { return cmp.Compare(a.n, b.n) })
	merged := locks[:0]
	for _, lk := range locks {
		if last := len(merged) - 1; last >= 0 && merged[last].n == lk.n {
			merged[last].key.Shared = merged[last].key.Shared && lk.key.Shared
			continue
		}
		merged = append(merged, lk)
	}
	locks = merged
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	conn, err := l.db.sql.Conn(ctx)
	if err != nil {
		<-l.slots
		return nil, fmt.Errorf("signature tag lock: %w", mapErr(err))
	}
	for _, lk := range locks {
		// A failed wait drops the connection, and the server releases
		// the keys locked before it with the session.
		if err := l.lock(ctx, conn, lk); err != nil {
			_ = conn.Close()
			<-l.slots
			return nil, err
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.unlock(conn, locks)
			<-l.slots
		})
	}, nil
}

// lock runs pg_advisory_lock(k.n) on conn, or pg_advisory_lock_shared
// for a shared key. The wait runs on a context of
// its own: when ctx ends, the server is asked to cancel the statement,
// which takes the session out of the lock's queue at once (a connection
// only closed would leave its backend waiting, to be granted the lock and
// hold it until it noticed). Should the cancel not get through, the
// statement's own context ends advisoryCancelGrace later and pgx drops the
// connection. A wait that did not end with the lock held drops its
// connection, which the server ends along with anything it holds.
func (l *advisoryLocks) lock(ctx context.Context, conn *sql.Conn, k advisoryKey) error {
	var err error
	rerr := conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			err = fmt.Errorf("store: PostgreSQL driver connection is %T, not pgx", dc)
			return err
		}
		pc := sc.Conn()
		wait, stop := context.WithCancel(context.WithoutCancel(ctx))
		defer stop()
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			select {
			case <-ctx.Done():
			case <-wait.Done():
				return
			}
			cctx, cancel := context.WithTimeout(wait, advisoryCancelGrace)
			defer cancel()
			_ = pc.PgConn().CancelRequest(cctx)
			<-cctx.Done()
			stop()
		}()
		l.db.statements.Add(1)
		q := `SELECT pg_advisory_lock($1)`
		if k.key.Shared {
			q = `SELECT pg_advisory_lock_shared($1)`
		}
		_, err = pc.Exec(wait, q, k.n)
		stop()
		<-watched
		switch {
		case ctx.Err() != nil:
			// Granted or not: a cancel may still be on its way to
			// this session, and a lock granted to a caller who gave up
			// is released with the session.
			err = ctx.Err()
		case err != nil:
			err = fmt.Errorf("signature tag lock: %w", mapErr(err))
		default:
			return nil
		}
		return driver.ErrBadConn // dropped, not returned to the pool
	})
	if err == nil && rerr != nil {
		err = fmt.Errorf("signature tag lock: %w", mapErr(rerr))
	}
	return err
}

// advisoryKey is a key and its advisory lock number.
type advisoryKey struct {
	key registry.Key
	n   int64
}

// unlock releases locks and gives conn back to the pool,
// or drops conn when an unlock failed: the server ends the session, and
// the locks with it, so the pool never hands out a connection holding one.
func (l *advisoryLocks) unlock(conn *sql.Conn, locks []advisoryKey) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var (
		failed   string
		unlocked bool
		err      error
	)
	rerr := conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		for i := len(locks) - 1; i >= 0; i-- {
			l.db.statements.Add(1)
			q := `SELECT pg_advisory_unlock($1)`
			if locks[i].key.Shared {
				q = `SELECT pg_advisory_unlock_shared($1)`
			}
			err = pc.QueryRow(ctx, q, locks[i].n).Scan(&unlocked)
			if err != nil || !unlocked {
				failed = locks[i].key.String()
				return driver.ErrBadConn
			}
		}
		return nil
	})
	_ = conn.Close()
	switch {
	case failed != "":
		l.db.logger.Warn("signature tag lock: unlock failed, connection dropped to release it", "key", failed, "unlocked", unlocked, "err", err)
	case rerr != nil && !errors.Is(rerr, driver.ErrBadConn):
		names := make([]string, len(locks))
		for i, lk := range locks {
			names[i] = lk.key.String()
		}
		l.db.logger.Warn("signature tag lock: unlock could not run, connection dropped to release it", "keys", names, "err", rerr)
	}
}
