package billing_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// The crash test runs the real binary: testbin.M builds it once and removes
// it after the package's tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(testbin.M{M: m}, servertest.LeakIgnores()...) }
