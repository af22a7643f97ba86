package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// A replica whose clock is out of step with the database server's says so
// at start, with how far; one in step says nothing. On SQLite there is no
// other clock.
func TestWarnClockOffset(t *testing.T) {
	ctx := context.Background()
	warned := func(db *store.DB, now func() time.Time) string {
		var buf bytes.Buffer
		warnClockOffset(ctx, db, now, slog.New(slog.NewTextHandler(&buf, nil)))
		return buf.String()
	}
	pg := storetest.Open(t, store.Postgres)
	if log := warned(pg, time.Now); log != "" {
		t.Errorf("a clock in step with the database's warned: %s", log)
	}
	for _, skew := range []time.Duration{10 * time.Second, -10 * time.Second} {
		log := warned(pg, func() time.Time { return time.Now().Add(skew) })
		if !strings.Contains(log, "out of step with the database server's") {
			t.Fatalf("a clock %s off the database's did not warn: %q", skew, log)
		}
		off, err := pg.ClockOffset(ctx, func() time.Time { return time.Now().Add(skew) })
		if err != nil || (off-skew).Abs() > time.Second {
			t.Errorf("ClockOffset with a clock %s off: %s (%v)", skew, off, err)
		}
	}
	if log := warned(storetest.Open(t, store.SQLite), func() time.Time { return time.Now().Add(time.Hour) }); log != "" {
		t.Errorf("SQLite warned: %s", log)
	}
}
