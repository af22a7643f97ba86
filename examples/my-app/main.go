// Command my-app is the quickstart's example app: a small HTTP server built
// FROM scratch (CGO_ENABLED=0 go build), with no base image. The quickstart
// builds it twice, as 1.0.0 and 2.0.0, to show an upgrade.
//
// It also has a web UI at /ui/, which the platform's UI gateway serves on
// the instance's own origin (the manifest declares ui.extension_kind:
// embedded): a page, a WebSocket echo at /ui/echo, and /ui/headers, which
// shows the request headers the app received (what the gateway forwards).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// version is set at build time: go build -ldflags "-X main.version=2.0.0".
var version = "dev"

const page = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>my-app %[1]s</title></head>
<body style="font:16px system-ui,sans-serif;margin:2rem">
<h1 id="title">my-app %[1]s</h1>
<p>This page is served by the app through the platform's UI gateway.</p>
<p><input id="msg" value="ping"> <button id="send">Send over WebSocket</button></p>
<p>Echo: <output id="echo"></output></p>
<script src="app.js"></script>
</body></html>
`

// The page's script: a WebSocket to /ui/echo on the page's own origin.
const script = `(function () {
  var out = document.getElementById("echo");
  var ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + location.pathname.replace(/[^/]*$/, "") + "echo");
  ws.onmessage = function (e) { out.textContent = e.data; };
  ws.onopen = function () { document.body.setAttribute("data-ws", "open"); };
  ws.onerror = function () { document.body.setAttribute("data-ws", "error"); };
  document.getElementById("send").onclick = function () { ws.send(document.getElementById("msg").value); };
})();
`

func main() {
	addr := os.Getenv("LISTEN")
	if addr == "" {
		addr = ":8080"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from my-app %s, a gpuaas example\n", version)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, page, version)
	})
	mux.HandleFunc("GET /ui/app.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, script)
	})
	mux.HandleFunc("GET /ui/headers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"host": r.Host, "headers": r.Header})
	})
	mux.HandleFunc("GET /ui/echo", echo)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// SIGTERM (docker stop) ends the server cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("my-app %s listening on %s", version, addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// echo sends every WebSocket message back. The gateway checked the Origin
// before the upgrade reached the app; the app accepts its own origin only.
func echo(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	for {
		typ, msg, err := c.Read(r.Context())
		if err != nil {
			return
		}
		if err := c.Write(r.Context(), typ, msg); err != nil {
			return
		}
	}
}
