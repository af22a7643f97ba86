module github.com/gpuaas/gpuaas/examples/vllm-openai

go 1.26
