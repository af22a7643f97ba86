package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/gpuaas/gpuaas/internal/store"
)

// clockWarnAfter is how far a replica's clock may be from the database
// server's before the replica warns at start. Replicas judge times other
// replicas stamped: a node is marked down when its last heartbeat, stamped
// by the replica that took it, is older than the TTL plus the grace by
// the clock of the replica that checks (10 s + 5 s by default, with beats
// every 3.3 s, so a checker some 12 s ahead marks live nodes down every
// round); and a used assertion id is kept 60 s past the skew the exchange
// allows (docs/operations.md, "Scaling").
const clockWarnAfter = 2 * time.Second

// warnClockOffset logs, once at start, a replica clock out of step with
// the database server's: the one clock every replica can compare with.
func warnClockOffset(ctx context.Context, db *store.DB, now func() time.Time, logger *slog.Logger) {
	off, err := db.ClockOffset(ctx, now)
	if err != nil {
		logger.WarnContext(ctx, "could not compare this replica's clock with the database server's", "err", err)
		return
	}
	if off > clockWarnAfter || off < -clockWarnAfter {
		logger.WarnContext(ctx, "this replica's clock is out of step with the database server's: keep every replica's clock in sync (NTP), "+
			"or other replicas' checks mark live nodes down and may accept a used assertion again",
			"ahead_by", off.Round(time.Millisecond).String(), "tolerance", clockWarnAfter.String())
	}
}
