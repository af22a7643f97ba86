// vLLM (OpenAI-compatible): a gpuaas app, started by `gpuaas init --template vllm-compose`.
//
// The platform runs this image as the primary service of a curated Compose
// project (the vllm_openai renderer): it hands the container vLLM's own
// arguments (--model M --served-model-name M --host 0.0.0.0 --port 8000 …)
// and probes GET /v1/models on port 8000. This program is the image's
// entrypoint and stands between the two:
//   - it starts the OpenAI-compatible server (VLLM_COMMAND, default
//     `python3 -m vllm.entrypoints.openai.api_server`) with the same
//     arguments, moved to a loopback port, and serves port 8000 itself;
//   - it passes every request through and counts the tokens each answer
//     says it used (usage.total_tokens; for a stream it asks for the usage
//     chunk and reads it), and reports them as the instance itself with the
//     identity the platform mounts (usage.go);
//   - GET /v1/models answers 503 until the server answers, so readiness
//     waits for the model to load, and again once a stop begins;
//   - SIGTERM stops it cleanly: no new requests, in-flight ones finish, the
//     server gets SIGTERM and is waited for, owed usage is reported, exit 0;
//     a second signal changes nothing.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// version is set at build time (-ldflags "-X main.version=1.2.0").
var version = "dev"

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(log, os.Args[1:]); err != nil {
		log.Error("stopped", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, args []string) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	listen, backendArgs := splitListen(args)
	backendPort := envOr("BACKEND_PORT", "8001")
	backendArgs = append(backendArgs, "--host", "127.0.0.1", "--port", backendPort)
	command := strings.Fields(envOr("VLLM_COMMAND", "python3 -m vllm.entrypoints.openai.api_server"))
	backend := exec.Command(command[0], append(command[1:], backendArgs...)...)
	backend.Stdout, backend.Stderr = os.Stdout, os.Stderr
	if err := backend.Start(); err != nil {
		return fmt.Errorf("start the model server %q: %w", command[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- backend.Wait() }()

	meter, err := newUsageReporter(log, "tokens") // gpuaas.yaml: metering.kind
	if err != nil {
		return err
	}
	upstream := &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", backendPort)}
	var stopping atomic.Bool
	p := &proxy{upstream: upstream, meter: meter, log: log, stopping: &stopping}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	ctx, stopMeter := context.WithCancel(context.Background())
	defer stopMeter()
	meterDone := make(chan struct{})
	go func() { defer close(meterDone); meter.Run(ctx) }()
	log.Info("serving", "addr", listen, "backend", upstream.String(), "version", version, "usage_reporting", meter.Enabled())

	select {
	case err := <-errc:
		return err
	case err := <-exited:
		return fmt.Errorf("the model server exited: %v", err)
	case s := <-sigs:
		log.Info("stopping", "signal", s.String())
	}
	stopping.Store(true)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("in-flight requests cut off", "err", err)
	}
	_ = backend.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-shutdownCtx.Done():
		_ = backend.Process.Kill()
		<-exited
	}
	stopMeter()
	<-meterDone
	if err := meter.Flush(shutdownCtx); err != nil {
		log.Warn("usage not reported before exit", "err", err)
	}
	log.Info("stopped cleanly")
	return nil
}

// splitListen takes --host and --port out of the server's arguments: this
// program listens there, and the server on loopback.
func splitListen(args []string) (listen string, rest []string) {
	host, port := "0.0.0.0", envOr("PORT", "8000")
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		if name != "--host" && name != "--port" {
			rest = append(rest, a)
			continue
		}
		if !hasVal && i+1 < len(args) {
			i++
			val = args[i]
		}
		if name == "--host" {
			host = val
		} else {
			port = val
		}
	}
	return net.JoinHostPort(host, port), rest
}

type proxy struct {
	upstream *url.URL
	meter    *usageReporter
	log      *slog.Logger
	stopping *atomic.Bool
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.stopping.Load() {
		http.Error(w, `{"error":{"message":"stopping"}}`, http.StatusServiceUnavailable)
		return
	}
	metered := r.Method == http.MethodPost && (r.URL.Path == "/v1/completions" || r.URL.Path == "/v1/chat/completions")
	if metered {
		if err := askForStreamUsage(r); err != nil {
			http.Error(w, `{"error":{"message":"the request body is not JSON"}}`, http.StatusBadRequest)
			return
		}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(p.upstream) },
		// Stream tokens as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The model server is not up yet (or has gone): readiness
			// keeps waiting, a client is told to retry.
			w.Header().Set("Retry-After", "2")
			http.Error(w, `{"error":{"message":"the model server is not answering yet"}}`, http.StatusServiceUnavailable)
		},
	}
	if metered {
		rp.ModifyResponse = func(resp *http.Response) error {
			resp.Body = &tokenCounter{body: resp.Body, meter: p.meter, stream: strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")}
			return nil
		}
	}
	rp.ServeHTTP(w, r)
}

// askForStreamUsage makes a streamed completion end with a usage chunk
// (stream_options.include_usage), the only place a stream says how many
// tokens it used.
func askForStreamUsage(r *http.Request) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		return err
	}
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		return err
	}
	if req["stream"] == true {
		opts, _ := req["stream_options"].(map[string]any)
		if opts == nil {
			opts = map[string]any{}
		}
		opts["include_usage"] = true
		req["stream_options"] = opts
		if body, err = json.Marshal(req); err != nil {
			return err
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

// tokenCounter passes an answer through and, at its end, counts the
// tokens it reports: usage.total_tokens of the JSON answer, or of the
// stream's data: chunks. A stream is read line by line as it passes, so
// its usage chunk, which comes last, is seen however long the answer.
type tokenCounter struct {
	body   io.ReadCloser
	meter  *usageReporter
	stream bool
	seen   bytes.Buffer // a JSON answer so far (up to a bound), or a stream's unfinished line
	total  int64        // the last usage a stream's chunks reported
	done   bool
}

const maxCounted = 4 << 20

func (t *tokenCounter) Read(b []byte) (int, error) {
	n, err := t.body.Read(b)
	if t.stream {
		t.lines(b[:n])
	} else if t.seen.Len() < maxCounted {
		t.seen.Write(b[:n])
	}
	if err == io.EOF && !t.done {
		t.done = true
		if t.stream {
			t.lines([]byte("\n")) // a last line without its newline
		}
		t.meter.Add(t.tokens())
	}
	return n, err
}

// lines reads the stream's complete lines in p; an unfinished one waits
// in seen (a line past the bound is no usage chunk, and is dropped).
func (t *tokenCounter) lines(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if t.seen.Len()+len(p) <= maxCounted {
				t.seen.Write(p)
			} else {
				t.seen.Reset()
			}
			return
		}
		if t.seen.Len()+i <= maxCounted {
			t.seen.Write(p[:i])
			t.line(t.seen.Bytes())
		}
		t.seen.Reset()
		p = p[i+1:]
	}
}

func (t *tokenCounter) line(l []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimRight(l, "\r"), []byte("data: "))
	if !ok || !bytes.Contains(data, []byte(`"usage"`)) {
		return
	}
	var u usageOf
	if json.Unmarshal(data, &u) == nil && u.Usage != nil {
		t.total = u.Usage.TotalTokens // the last chunk's count is the whole answer's
	}
}

func (t *tokenCounter) Close() error { return t.body.Close() }

type usageOf struct {
	Usage *struct {
		TotalTokens int64 `json:"total_tokens"`
	} `json:"usage"`
}

func (t *tokenCounter) tokens() int64 {
	if t.stream {
		return t.total
	}
	var u usageOf
	if json.Unmarshal(t.seen.Bytes(), &u) == nil && u.Usage != nil {
		return u.Usage.TotalTokens
	}
	return 0
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
