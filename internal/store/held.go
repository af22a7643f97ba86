package store

import (
	"context"
	"fmt"
	"strings"
)

// Held writes: a mutation's trailing inserts (its audit rows, outbox
// events, an allocation and its GPU holds, a billing interval) produce
// nothing the transaction reads back, yet each would cost PostgreSQL a
// round trip of its own — on 2 cores most of a placement's time was spent
// in those round trips, not in the statements. Inside a PostgreSQL
// transaction such an insert is held and sent with the other held inserts
// as one statement (data-modifying WITH clauses) just before the next
// statement of the transaction, so every later statement still sees it, or
// in the round trip of its COMMIT (pgtx.go). Its error surfaces there:
// InTx returns it.
//
// SQLite runs in-process, with no round trip to save: it executes at once.

type heldWrite struct {
	query string // one INSERT with '?' placeholders, no trailing ';'
	args  []any
}

// execHeld runs an INSERT whose result is not needed: at once outside a
// PostgreSQL transaction, otherwise held until the next statement.
func (q *Queries) execHeld(ctx context.Context, query string, args ...any) error {
	if !q.hold {
		_, err := q.exec(ctx, query, args...)
		return err
	}
	if q.heldErr != nil {
		return q.heldErr
	}
	q.held = append(q.held, heldWrite{query: query, args: args})
	return nil
}

// sendHeld sends the held inserts, if any. The first error is kept: the
// transaction cannot go on after it. Queries that hold nothing (outside a
// PostgreSQL transaction) write nothing here: one of them may be shared by
// concurrent requests (iam's token check keeps one).
func (q *Queries) sendHeld(ctx context.Context) error {
	if !q.hold {
		return nil
	}
	if q.heldErr != nil {
		return q.heldErr
	}
	for _, h := range q.heldStatements() {
		if _, err := q.ex.ExecContext(ctx, h.query, h.args...); err != nil {
			q.heldErr = mapErr(err)
			return q.heldErr
		}
	}
	return nil
}

// heldStatements takes the held inserts as statements ready to send: one
// per at most maxHeldWrites inserts and maxHeldArgs arguments (a mutation
// can emit thousands of events; PostgreSQL takes at most 65,535
// parameters, and every distinct composition is a statement pgx prepares
// and caches).
func (q *Queries) heldStatements() []heldWrite {
	held := q.held
	q.held = nil
	var out []heldWrite
	for len(held) > 0 {
		n, nargs := 0, 0
		for n < len(held) && n < maxHeldWrites && (n == 0 || nargs+len(held[n].args) <= maxHeldArgs) {
			nargs += len(held[n].args)
			n++
		}
		query, args := held[0].query, held[0].args
		if n > 1 {
			query, args = composeHeld(held[:n])
		}
		out = append(out, heldWrite{query: q.rebind(query), args: args})
		held = held[n:]
	}
	return out
}

const (
	maxHeldWrites = 16
	maxHeldArgs   = 4096
)

// composeHeld makes one statement of several inserts: all but the last in
// WITH clauses. Their placeholders keep their order, so rebind numbers them
// in the order of the arguments.
func composeHeld(held []heldWrite) (string, []any) {
	var b strings.Builder
	n := 0
	for _, h := range held {
		n += len(h.args)
		b.Grow(len(h.query) + 16)
	}
	args := make([]any, 0, n)
	b.WriteString("WITH ")
	for i, h := range held[:len(held)-1] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "held%d AS (%s)", i, h.query)
		args = append(args, h.args...)
	}
	last := held[len(held)-1]
	b.WriteString(" ")
	b.WriteString(last.query)
	return b.String(), append(args, last.args...)
}
