package httpapi_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql keeps one opener goroutine per pool until Close, and
		// pgx's pool health checks outlive a test by a tick.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
		// distribution's App starts a notification broadcaster that
		// App.Shutdown never closes: one parked goroutine per embedded registry.
		goleak.IgnoreTopFunction("github.com/docker/go-events.(*Broadcaster).run"),
	)
}
