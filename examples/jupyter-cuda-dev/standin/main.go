// Command standin is a CPU stand-in for JupyterLab: it takes the lab's
// arguments and answers the parts the platform and main.go use (GET
// /api/status with a running kernel, the /lab page), and `standin pip
// install …` stands in for pip. It lets `gpuaas app smoke` and CI run the
// app on a machine with no GPU and without pulling a multi-gigabyte
// image (Dockerfile.standin).
package main

import (
	"encoding/json"
	"fmt"
	"html"
	"log"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pip" {
		// standin pip install --no-cache-dir -- REQ…
		reqs := os.Args[2:]
		for i, a := range reqs {
			if a == "--" {
				reqs = reqs[i+1:]
				break
			}
		}
		fmt.Printf("standin pip: would install %s\n", strings.Join(reqs, " "))
		return
	}
	port, base := "8888", ""
	for _, a := range os.Args[1:] {
		if v, ok := strings.CutPrefix(a, "--port="); ok {
			port = v
		}
		if v, ok := strings.CutPrefix(a, "--ServerApp.base_url="); ok {
			base = strings.TrimRight(v, "/")
		}
	}
	started := time.Now().UTC()
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+base+"/api/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// One kernel runs from the start: as if a notebook were open.
		_ = json.NewEncoder(w).Encode(map[string]any{"started": started, "last_activity": time.Now().UTC(), "connections": 0, "kernels": 1})
	})
	mux.HandleFunc("GET "+base+"/lab", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "<!doctype html><title>JupyterLab (stand-in)</title><h1>JupyterLab stand-in</h1><p>%s</p>\n", html.EscapeString(strings.Join(os.Args[1:], " ")))
	})
	log.Printf("standin lab on :%s%s", port, base)
	log.Fatal((&http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
}
