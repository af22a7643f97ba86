module github.com/gpuaas/gpuaas/examples/cluster-app

go 1.26
