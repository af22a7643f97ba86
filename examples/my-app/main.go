// Command my-app is the quickstart's example app: a static HTTP server small
// enough to build FROM scratch (CGO_ENABLED=0 go build), with no base image.
// The quickstart builds it twice, as 1.0.0 and 2.0.0, to show an upgrade.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
)

// version is set at build time: go build -ldflags "-X main.version=2.0.0".
var version = "dev"

func main() {
	addr := os.Getenv("LISTEN")
	if addr == "" {
		addr = ":8080"
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from my-app %s, a gpuaas example\n", version)
	})
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	log.Printf("my-app %s listening on %s", version, addr)
	log.Fatal(http.ListenAndServe(addr, nil))
}
