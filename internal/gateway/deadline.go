package gateway

import (
	"context"
	"io"
	"net/http"
	"sync"
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
// read deadline itself (to watch for the browser leaving). A body goes
// through a movingBody even without a read timeout: it keeps the
// browser's failure to send it.
func (g *Gateway) perWait(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	rc := http.NewResponseController(w)
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &movingBody{ReadCloser: r.Body, rc: rc, d: g.cfg.ReadTimeout}
	}
	if g.cfg.WriteTimeout > 0 {
		w = &movingWriter{ResponseWriter: w, rc: rc, d: g.cfg.WriteTimeout}
	}
	return w, r
}

// movingBody gives each read of a request body d (0: no deadline), and
// keeps what failed a read: the browser stopped sending (a stall, or a
// body shorter than its Content-Length), which is no failure of the app's.
type movingBody struct {
	io.ReadCloser
	rc *http.ResponseController
	d  time.Duration

	mu  sync.Mutex // held while a read is in progress
	err error      // the read's failure (not io.EOF)
}

func (b *movingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.d > 0 {
		_ = b.rc.SetReadDeadline(deadlineIn(b.d))
	}
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// failed is the browser's failure to send the body, if it had one, for a
// proxied request that failed with ctx its context. net/http cancels ctx
// when a read from the browser fails, inside that read, and the transport
// may give up on the cancellation before the read has returned: with ctx
// ended, failed waits for a read in progress. Otherwise one in progress
// means the browser is still sending.
func (b *movingBody) failed(ctx context.Context) error {
	if ctx.Err() != nil {
		b.mu.Lock()
	} else if !b.mu.TryLock() {
		return nil
	}
	defer b.mu.Unlock()
	return b.err
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
