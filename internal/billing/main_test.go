package billing_test

import (
	"testing"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, servertest.LeakIgnores()...) }
