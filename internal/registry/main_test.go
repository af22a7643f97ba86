package registry

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// distribution's App starts a notification broadcaster that
		// App.Shutdown never closes: one parked goroutine per Registry.
		goleak.IgnoreTopFunction("github.com/docker/go-events.(*Broadcaster).run"),
	)
}
