package api

import _ "embed"

// AsyncAPI is the event contract (AsyncAPI 3.0), served at /api/asyncapi.yaml
// and used by the tests to validate every event they cause.
//
//go:embed asyncapi.yaml
var AsyncAPI []byte
