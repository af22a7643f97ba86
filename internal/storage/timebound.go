package storage

import (
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// Earliest and latest bound the times a filter may name: the stores keep
// timestamps as UTC with a four-digit year, PostgreSQL refuses year 0 (a
// 500 if it reached it), and on SQLite a five-digit year would compare as
// text out of order. RFC 3339 allows years 0000 to 9999, and an offset can
// move a bound across either end once it is turned to UTC.
var (
	EarliestTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	LatestTime   = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

// CheckTime refuses a filter's time bound (named name) that the store
// cannot compare against: one before EarliestTime or after LatestTime.
func CheckTime(name string, t time.Time) error {
	if t.Before(EarliestTime) || t.After(LatestTime) {
		return errdefs.Invalid("invalid_time", "%s must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z", name)
	}
	return nil
}
