// Command standin is a CPU stand-in for vLLM's OpenAI-compatible server:
// the same arguments, the same endpoints (GET /v1/models, POST
// /v1/completions and /v1/chat/completions, streamed or not, with usage),
// and an answer made of the prompt's words instead of a model's. It lets
// `gpuaas app smoke` and CI run the app on a machine with no GPU and
// without pulling a multi-gigabyte image (Dockerfile.standin).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	fs := flag.NewFlagSet("standin", flag.ContinueOnError)
	model := fs.String("model", "", "model id")
	served := fs.String("served-model-name", "", "name the API answers with")
	host := fs.String("host", "127.0.0.1", "listen host")
	port := fs.String("port", "8001", "listen port")
	// vLLM's tuning flags mean nothing here; accept them.
	fs.String("max-model-len", "", "ignored")
	fs.String("gpu-memory-utilization", "", "ignored")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	name := *served
	if name == "" {
		name = *model
	}
	if name == "" {
		log.Fatal("--model is required")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{"id": name, "object": "model", "owned_by": "standin"}}})
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { complete(w, r, name, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { complete(w, r, name, true) })
	addr := net.JoinHostPort(*host, *port)
	log.Printf("standin serving %s on %s", name, addr)
	log.Fatal((&http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
}

type request struct {
	Model    string `json:"model"`
	Prompt   string `json:"prompt"`
	Messages []struct {
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens     int  `json:"max_tokens"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func complete(w http.ResponseWriter, r *http.Request, name string, chat bool) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": "bad JSON: " + err.Error()}})
		return
	}
	if req.Model != name {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"message": fmt.Sprintf("the model %q does not exist; this server has %q", req.Model, name)}})
		return
	}
	prompt := req.Prompt
	for _, m := range req.Messages {
		prompt += " " + m.Content
	}
	in := strings.Fields(prompt)
	out := append([]string{"echo:"}, in...)
	if req.MaxTokens > 0 && len(out) > req.MaxTokens {
		out = out[:req.MaxTokens]
	}
	usage := map[string]int{"prompt_tokens": len(in), "completion_tokens": len(out), "total_tokens": len(in) + len(out)}
	id := fmt.Sprintf("cmpl-%d", time.Now().UnixNano())
	choice := func(text string) map[string]any {
		if chat {
			return map[string]any{"index": 0, "message": map[string]string{"role": "assistant", "content": text}, "finish_reason": "stop"}
		}
		return map[string]any{"index": 0, "text": text, "finish_reason": "stop"}
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "completion", "model": name, "choices": []any{choice(strings.Join(out, " "))}, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	for _, word := range out {
		delta := map[string]any{"index": 0, "text": word + " "}
		if chat {
			delta = map[string]any{"index": 0, "delta": map[string]string{"content": word + " "}}
		}
		send(map[string]any{"id": id, "object": "completion.chunk", "model": name, "choices": []any{delta}})
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		send(map[string]any{"id": id, "object": "completion.chunk", "model": name, "choices": []any{}, "usage": usage})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
