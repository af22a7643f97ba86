package store

import (
	"context"
	"fmt"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

var _ storage.Tx = (*Tx)(nil)

// Port is one domain's storage.Store over this database: T is the domain's
// transaction interface and Q its queries, both satisfied by this package's
// Tx and Queries. Every domain gets its port from the wiring.
type Port[T storage.Tx, Q any] struct{ db *DB }

// NewPort checks once, at wiring time, that this package implements the
// domain's interfaces (each domain's file here also asserts it at compile
// time), so the conversions below cannot fail later.
func NewPort[T storage.Tx, Q any](db *DB) Port[T, Q] {
	if _, ok := any((*Tx)(nil)).(T); !ok {
		panic(fmt.Sprintf("store: *Tx does not implement %T", new(T)))
	}
	if _, ok := any((*Queries)(nil)).(Q); !ok {
		panic(fmt.Sprintf("store: *Queries does not implement %T", new(Q)))
	}
	return Port[T, Q]{db: db}
}

func (p Port[T, Q]) Mutate(ctx context.Context, fn func(tx T) error) error {
	return p.db.Mutate(ctx, func(tx *Tx) error { return fn(any(tx).(T)) })
}

func (p Port[T, Q]) Join(tx storage.Tx) T { return tx.(T) }

func (p Port[T, Q]) Read() Q { return any(p.db.Queries()).(Q) }

func (p Port[T, Q]) InTx(ctx context.Context, fn func(q Q) error) error {
	return p.db.InTx(ctx, func(q *Queries) error { return fn(any(q).(Q)) })
}

func (p Port[T, Q]) RecordOutcome(ctx context.Context, e storage.AuditEvent, outcome string) error {
	return p.db.RecordOutcome(ctx, e, outcome)
}

var (
	_ iam.Tx      = (*Tx)(nil)
	_ iam.Queries = (*Queries)(nil)
)

// IAM is the IAM domain's storage.
func IAM(db *DB) iam.Store { return NewPort[iam.Tx, iam.Queries](db) }
