package doctest

import (
	"testing"

	"github.com/gpuaas/gpuaas/internal/testbin"
)

// TestMain removes the gpuaas binary the walks built.
func TestMain(m *testing.M) { testbin.Main(m) }
