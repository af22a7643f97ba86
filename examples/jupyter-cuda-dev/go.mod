module github.com/gpuaas/gpuaas/examples/jupyter-cuda-dev

go 1.26
