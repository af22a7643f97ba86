package storage

import (
	"encoding/base64"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// Page asks for one page of a list ordered by id. Ids are UUIDv7, so id
// order is creation order and a cursor is just the last id seen, encoded.
type Page struct {
	Limit  int
	Cursor string // opaque, from a previous Page result
}

const (
	DefaultPageLimit = 50
	MaxPageLimit     = 500
)

// AfterID decodes the cursor and clamps the limit: the id to continue after
// ("" from the start) and how many rows to return.
func (p Page) AfterID() (string, int, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = DefaultPageLimit
	}
	if limit > MaxPageLimit {
		limit = MaxPageLimit
	}
	if p.Cursor == "" {
		return "", limit, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(p.Cursor)
	// Every id is a UUID in canonical form; anything else would silently
	// page from an arbitrary point (an empty or a full list), so refuse it.
	if err != nil || !CanonicalUUID(string(raw)) {
		return "", 0, errdefs.Invalid("invalid_cursor", "the cursor is not one this server issued; start again without a cursor")
	}
	return string(raw), limit, nil
}

// CanonicalUUID says whether s is a UUID in its canonical lower-case form.
func CanonicalUUID(s string) bool {
	u, err := uuid.Parse(s)
	return err == nil && u.String() == s
}

// EncodeCursor turns the last id of a page into the next cursor.
func EncodeCursor(lastID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(lastID))
}
