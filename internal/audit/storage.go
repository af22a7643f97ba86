package audit

import (
	"context"
	"time"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// Queries is what the audit retention reads and writes. The audit rows
// themselves are storage.AuditEvent, written by every domain's mutation.
type Queries interface {
	// PruneAudit deletes the audit rows that occurred before cutoff, at
	// most batch rows per statement (batch <= 0: 10,000), statement after
	// statement until one deletes fewer than batch, and returns how many
	// it deleted (those of the statements that succeeded, also beside an
	// error). Run it outside a transaction, so each statement commits on
	// its own and no pass holds a long lock.
	//
	// It deletes in id order (ids are UUIDv7, so oldest first) and stops
	// at the first batch that holds a row inside the retention: it never
	// deletes a row at or after cutoff, and a row stamped out of id order
	// holds back the rows after it only until it ages out itself.
	PruneAudit(ctx context.Context, cutoff time.Time, batch int) (int64, error)
}

// Tx is an audit mutation (the retention writes none of its own; it is
// here because a Store has one).
type Tx interface {
	storage.Tx
	Queries
}

// Store is the audit retention's storage.
type Store = storage.Store[Tx, Queries]
