// Package api holds the contract files of gpuaas: the OpenAPI document of
// the REST API (and, in schemas/, the JSON Schemas of manifests).
package api

import _ "embed"

// OpenAPI is the REST contract, served at /api/openapi.yaml and used by the
// tests to validate every response they see.
//
//go:embed openapi.yaml
var OpenAPI []byte
