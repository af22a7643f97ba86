package store

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCache keeps prepared statements of the SQLite pool, one per SQL text,
// so a statement is parsed once per connection instead of on every call:
// the SQL parser was about a fifth of the CPU of a placement. database/sql
// prepares a cached statement lazily on each connection that runs it,
// transactions included (Tx.StmtContext reuses the connection's copy).
// PostgreSQL needs none of this: pgx caches its prepared statements.
//
// A statement missing from the cache is run unprepared once and prepared
// on the pool in the background: preparing it there from inside a
// transaction could wait for a pool connection that other transactions
// hold while they wait for this one's write lock.
type stmtCache struct {
	db *sql.DB

	mu       sync.RWMutex
	m        map[string]*sql.Stmt
	inflight map[string]bool
	closed   bool
}

// maxCachedStmts bounds the cache; statements with generated SQL (multi-row
// inserts of varying width) stop being cached once it is full.
const maxCachedStmts = 512

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: map[string]*sql.Stmt{}, inflight: map[string]bool{}}
}

// get returns the prepared statement for query, or nil (then run it
// unprepared) while it is being prepared.
func (c *stmtCache) get(query string) *sql.Stmt {
	if c == nil {
		return nil
	}
	c.mu.RLock()
	st := c.m[query]
	c.mu.RUnlock()
	if st != nil {
		return st
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.inflight[query] || len(c.m)+len(c.inflight) >= maxCachedStmts {
		return nil
	}
	c.inflight[query] = true
	go c.prepare(query)
	return nil
}

func (c *stmtCache) prepare(query string) {
	st, err := c.db.PrepareContext(context.Background(), query)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inflight, query)
	if err != nil {
		return // run unprepared; the next call tries again
	}
	if c.closed {
		_ = st.Close()
		return
	}
	c.m[query] = st
}

func (c *stmtCache) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, st := range c.m {
		_ = st.Close()
	}
	c.m = map[string]*sql.Stmt{}
}

// stmt returns the cached statement for query bound to q's transaction
// (or the pool), or nil to run the query unprepared.
func (q *Queries) stmt(ctx context.Context, query string) *sql.Stmt {
	st := q.stmts.get(query)
	if st == nil {
		return nil
	}
	if q.tx != nil {
		return q.tx.StmtContext(ctx, st)
	}
	return st
}
