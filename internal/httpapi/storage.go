package httpapi

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Queries is what the HTTP edge itself reads and writes, besides what it
// asks the domain services: the idempotency records of keyed requests, the
// audit log, the caller's role bindings, and the outbox operators inspect.
type Queries interface {
	iam.GrantReader
	events.ParkedLister

	ClaimIdempotencyKey(ctx context.Context, r storage.IdempotencyRecord) error
	GetIdempotencyRecord(ctx context.Context, principal, key string) (storage.IdempotencyRecord, error)
	CompleteIdempotencyKey(ctx context.Context, c storage.IdempotencyClaim, status int, body []byte, contentType string, headers map[string]string) error
	ReleaseIdempotencyKey(ctx context.Context, c storage.IdempotencyClaim) error

	ListAudit(ctx context.Context, f storage.AuditFilter, p storage.Page) ([]storage.AuditEvent, string, error)

	ParkedEventCounts(ctx context.Context) (map[string]int64, error)
	RequeueEvents(ctx context.Context, from int64) (int64, error)
}

// Tx is a mutation the edge runs itself (an operator's republish).
type Tx interface {
	storage.Tx
	Queries
}

// Store is the HTTP edge's storage.
type Store = storage.Store[Tx, Queries]

// Health is what /readyz asks of the database.
type Health interface {
	Ping(ctx context.Context) error
	CheckSchema(ctx context.Context) error
}
