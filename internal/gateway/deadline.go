package gateway

import (
	"io"
	"net/http"
	"time"
)

// The server's read and write timeouts (--read-timeout, --write-timeout)
// bound a whole request, from when it came. For a proxied request that
// would cut short what an app may rightly do: stream events for hours,
// take a minute over a model's answer, take a slow upload. Both listeners
// move the deadlines instead, so that each timeout bounds one wait for the
// browser (for more of the body, or to take more of the answer) and the
// wait for the app is the app's. A browser that stops sending, or stops
// reading, is still cut off.

// deadlineIn is when a wait of d that begins now ends. It reads the wall
// clock, not Config.Now: a deadline is the kernel's business, and a test's
// stopped clock would put every one in the past.
func deadlineIn(d time.Duration) time.Time { return time.Now().Add(d) }

// perWait gives a proxied request on the console's listener (net/http)
// deadlines that move with it. Once the body is read, net/http lifts the
// read deadline itself (to watch for the browser leaving).
func (g *Gateway) perWait(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	rc := http.NewResponseController(w)
	if g.cfg.ReadTimeout > 0 && r.Body != nil && r.Body != http.NoBody {
		r.Body = &movingBody{ReadCloser: r.Body, rc: rc, d: g.cfg.ReadTimeout}
	}
	if g.cfg.WriteTimeout > 0 {
		w = &movingWriter{ResponseWriter: w, rc: rc, d: g.cfg.WriteTimeout}
	}
	return w, r
}

// movingBody gives each read of a request body d.
type movingBody struct {
	io.ReadCloser
	rc *http.ResponseController
	d  time.Duration
}

func (b *movingBody) Read(p []byte) (int, error) {
	_ = b.rc.SetReadDeadline(deadlineIn(b.d))
	return b.ReadCloser.Read(p)
}

// movingWriter gives each write of an answer (its head, each piece of its
// body, each flush) d.
type movingWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *movingWriter) WriteHeader(code int) {
	_ = w.rc.SetWriteDeadline(deadlineIn(w.d))
	w.ResponseWriter.WriteHeader(code)
}

func (w *movingWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(deadlineIn(w.d))
	return w.ResponseWriter.Write(p)
}

// FlushError is what http.ResponseController.Flush (and so the reverse
// proxy) calls.
func (w *movingWriter) FlushError() error {
	_ = w.rc.SetWriteDeadline(deadlineIn(w.d))
	return w.rc.Flush()
}

func (w *movingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
