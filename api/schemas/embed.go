// Package schemas holds the JSON Schema (2020-12) contracts of the app
// manifest package and the runtime profile. They are embedded so that the
// server, the offline CLI validator and the tests all read the very same
// bytes that are published in the repository.
package schemas

import "embed"

// FS holds every *.json schema in this directory.
//
//go:embed *.json
var FS embed.FS
