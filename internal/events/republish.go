package events

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// RepublishResult says what a republish queued for the relay.
type RepublishResult struct {
	FromSequence int64 `json:"from_sequence"` // first retained position queued again (0: none)
	Events       int64 `json:"events"`        // rows marked unpublished
}

// RepublishFrom resolves an operator's `since` — a sequence, an event id or
// an RFC 3339 time, each inclusive — to the first retained position to
// send again. A point older than retention is cursor_expired (naming the
// oldest retained event): the rows are gone, republishing cannot restore
// them. A time after the newest event resolves to 0 (nothing to do).
func (rd *Reader) RepublishFrom(ctx context.Context, since string) (int64, error) {
	since = strings.TrimSpace(since)
	q := rd.Log.Read()
	oldest, newest, err := q.EventBounds(ctx)
	if err != nil {
		return 0, err
	}
	var from int64
	switch {
	case since == "":
		return 0, errdefs.Invalid("invalid_since", "since is required: a sequence, an event id or an RFC 3339 time")
	case strings.Trim(since, "0123456789") == "":
		n, err := strconv.ParseInt(since, 10, 64)
		if err != nil || n < 1 {
			return 0, errdefs.Invalid("invalid_since", "a sequence starts at 1")
		}
		if oldest > 1 && n < oldest {
			return 0, rd.expired(ctx, EventFilter{})
		}
		from = n
	case uuid.Validate(since) == nil:
		if from, err = q.EventPosition(ctx, since); errdefs.KindOf(err) == errdefs.KindNotFound {
			return 0, rd.expired(ctx, EventFilter{})
		} else if err != nil {
			return 0, err
		}
	default:
		t, err := time.Parse(time.RFC3339Nano, since)
		if err != nil {
			return 0, errdefs.Invalid("invalid_since", "since must be a sequence, an event id or an RFC 3339 time such as 2026-01-02T15:04:05Z")
		}
		rows, err := q.ListEvents(ctx, EventFilter{Since: t}, 0, 1)
		if err != nil || len(rows) == 0 {
			return 0, err
		}
		from = rows[0].Position
	}
	if from > newest {
		return 0, nil
	}
	return from, nil
}
