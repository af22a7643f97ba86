# The documented build: the binary names its version and commit even where
# the toolchain stamps none (GOFLAGS=-buildvcs=false, a tarball without .git).
PKG     := github.com/gpuaas/gpuaas/internal/buildinfo
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS := -X $(PKG).Version=$(VERSION) -X $(PKG).Commit=$(COMMIT) -X $(PKG).Date=$(DATE)
BIN     ?= bin

.PHONY: build install test
build: ## bin/gpuaas, stamped
	go build -ldflags "$(LDFLAGS)" -o $(BIN)/gpuaas ./cmd/gpuaas

install: ## gpuaas in $(go env GOPATH)/bin, stamped
	go install -ldflags "$(LDFLAGS)" ./cmd/gpuaas

test: ## the test command of README.md
	go test -race -count=1 -timeout 45m ./...
