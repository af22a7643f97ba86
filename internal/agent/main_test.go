package agent_test

import (
	"testing"

	"github.com/gpuaas/gpuaas/internal/testbin"
)

// TestMain removes the gpuaas binary the process tests built.
func TestMain(m *testing.M) { testbin.Main(m) }
