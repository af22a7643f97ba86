// Command gpuaas is the control plane, node agent and CLI of the gpuaas app platform.
package main

import (
	"os"

	"github.com/gpuaas/gpuaas/internal/cli"
)

func main() { os.Exit(cli.Execute()) }
