// Command my-app is the quickstart's example app: a static HTTP server small
// enough to build FROM scratch (CGO_ENABLED=0 go build), with no base image.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
)

func main() {
	addr := os.Getenv("LISTEN")
	if addr == "" {
		addr = ":8080"
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello from my-app, a gpuaas example")
	})
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	log.Printf("my-app listening on %s", addr)
	log.Fatal(http.ListenAndServe(addr, nil))
}
