package httpapi_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(binCleanup{m}, servertest.LeakIgnores()...) }

// binCleanup removes the gpuaas binary the process tests built, once.
type binCleanup struct{ *testing.M }

func (c binCleanup) Run() int {
	code := c.M.Run()
	if gpuaasBin != "" {
		_ = os.RemoveAll(filepath.Dir(gpuaasBin))
	}
	return code
}
