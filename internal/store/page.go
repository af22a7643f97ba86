package store

import (
	"fmt"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// Page and its cursor live in storage, shared with the domains.
type Page = storage.Page

const (
	DefaultPageLimit = storage.DefaultPageLimit
	MaxPageLimit     = storage.MaxPageLimit
)

// EncodeCursor turns the last id of a page into the next cursor.
func EncodeCursor(lastID string) string { return storage.EncodeCursor(lastID) }

func canonicalUUID(s string) bool { return storage.CanonicalUUID(s) }

// trimPage cuts the one extra row fetched to learn whether more exist.
func trimPage[T any](rows []T, limit int, id func(T) string) ([]T, string) {
	if len(rows) <= limit {
		return rows, ""
	}
	rows = rows[:limit]
	return rows, EncodeCursor(id(rows[len(rows)-1]))
}

func limitClause(limit int) string { return fmt.Sprintf(" LIMIT %d", limit+1) }
