package store

import (
	"testing"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// Cursors come from clients: any string must decode or be refused as an
// InvalidArgument, and an issued cursor must round-trip.
func FuzzPageCursor(f *testing.F) {
	f.Add("")
	f.Add(EncodeCursor("01a20241-19fb-7d0b-91d7-b800b0320fd2"))
	f.Add("%%%")
	f.Add("////")
	f.Fuzz(func(t *testing.T, cursor string) {
		after, limit, err := Page{Cursor: cursor, Limit: 7}.AfterID()
		if err != nil {
			if errdefs.KindOf(err) != errdefs.KindInvalidArgument {
				t.Fatalf("cursor %q: error of kind %v", cursor, errdefs.KindOf(err))
			}
			return
		}
		if limit != 7 {
			t.Fatalf("limit changed to %d", limit)
		}
		if cursor != "" && EncodeCursor(after) != cursor {
			// Non-canonical base64 may decode; it must still be a bounded id.
			if len(after) > 64 {
				t.Fatalf("oversized cursor accepted: %d bytes", len(after))
			}
		}
	})
}
