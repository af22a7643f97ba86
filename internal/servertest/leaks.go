package servertest

import "go.uber.org/goleak"

// LeakIgnores are the goroutines a test process that starts servers may
// legitimately leave behind, for goleak.VerifyTestMain:
//   - database/sql keeps one opener goroutine per pool until Close, and pgx's
//     pool health check outlives a test by a tick;
//   - idle keep-alive connections of test HTTP clients park in the poller;
//   - distribution's App starts a notification broadcaster that
//     App.Shutdown never closes: one parked goroutine per embedded registry.
func LeakIgnores() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("github.com/docker/go-events.(*Broadcaster).run"),
	}
}
