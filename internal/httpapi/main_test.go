package httpapi_test

import (
	"testing"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/testbin"
	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines and removes the gpuaas binary the
// process tests built.
func TestMain(m *testing.M) { goleak.VerifyTestMain(testbin.M{M: m}, servertest.LeakIgnores()...) }
