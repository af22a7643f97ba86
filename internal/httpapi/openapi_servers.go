package httpapi

import (
	"bytes"
	"net/http"
	"strings"
)

// relativeServer is the servers entry of api/openapi.yaml: "/" means "the
// host that served this document". When the document is fetched from a
// running server it is rewritten to that server's absolute origin, so SDK
// generators and API explorers pointed at /api/openapi.yaml call the host
// they fetched it from instead of a hard-coded address.
var relativeServer = []byte("servers:\n  - url: /\n")

func withServerOrigin(doc []byte, r *http.Request) []byte {
	if r.Host == "" || !bytes.Contains(doc, relativeServer) {
		return doc
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	origin := strings.ReplaceAll(scheme+"://"+r.Host, "'", "''")
	repl := []byte("servers:\n  - url: '" + origin + "'\n")
	return bytes.Replace(doc, relativeServer, repl, 1)
}
