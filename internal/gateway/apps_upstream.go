package gateway

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// The apps listener's requests to the apps go over fasthttp's HostClient
// pools, but not through HostClient.Do: its transport lacks what the
// console listener's (upstreamTransport) does, and the pool's own methods
// (AcquireConn, ReleaseConn, CloseConn) let roundTrip do it:
//
//   - A pooled connection is looked at before it carries a request
//     (connCheck). One the app closed while it sat idle, which many app
//     servers do after a few seconds, is dropped; through Do, a POST on it
//     failed with 502 (Do resends only GET, HEAD, PUT and a few more).
//     One the app wrote to unasked is dropped too: those bytes, read as the
//     answer to the next request, would reach whoever sent it.
//   - While the app has not answered, or streams nothing, the browser's
//     connection is watched (watchBrowser): if the browser goes away, the
//     app's connection is closed, which is how the app learns that nobody
//     waits for its answer (a model server stops generating then).
//     Through Do, the app went on until it answered.

// browserWatchAfter is how long a proxied request waits for its app before
// its browser's connection is watched: most answers come sooner, and a
// request answered sooner costs no watcher goroutine.
const browserWatchAfter = 100 * time.Millisecond

// errBrowserGone is a round trip's error when the browser went away before
// the app answered.
var errBrowserGone = errors.New("the browser went away before the app answered")

// roundTrip sends req to the app over a connection of hc's pool and reads
// the answer's head into resp. An answer with a body comes with an
// appBody to read it through; closing that gives the connection back to
// the pool (or closes it). browser is the connection req came on.
func roundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, browser net.Conn) (*appBody, error) {
	// Sent whole from memory and safe to repeat, a request goes once more,
	// on a new connection, when a pooled one closed before any answer
	// came: the app closed it as the request went out (net/http's
	// Transport resends the same requests).
	again := !req.IsBodyStream() && replayable(&req.Header)
	for {
		body, reused, err := exchange(hc, req, resp, browser)
		if err == nil || !reused || !again || !errors.Is(err, io.EOF) {
			return body, err
		}
		again = false
		resp.Reset()
	}
}

// replayable says whether a request may be sent twice, as net/http's
// Transport decides it: its method is safe, or it carries an idempotency
// key.
func replayable(h *fasthttp.RequestHeader) bool {
	switch string(h.Method()) {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	return h.Peek("Idempotency-Key") != nil || h.Peek("X-Idempotency-Key") != nil
}

// exchange is one try of roundTrip, on one connection; reused says
// whether that connection had carried requests before.
func exchange(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, browser net.Conn) (body *appBody, reused bool, err error) {
	cc, err := hc.AcquireConn(0, false)
	for err == nil && !cc.LastUseTime().IsZero() { // pooled, not new
		if connCheck(cc.Conn()) == nil {
			reused = true
			break
		}
		hc.CloseConn(cc)
		cc, err = hc.AcquireConn(0, false)
	}
	if err != nil {
		return nil, false, err
	}
	conn := cc.Conn()

	// The target goes as the browser sent it: req.URI() is never called,
	// so Write sends the request line and Host as outboundHeader set them,
	// unparsed and not normalised; no User-Agent is added.
	bw := hc.AcquireWriter(conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	early := false
	if err != nil {
		// An app may answer before it has read the whole body (a 413, a
		// 401) and close: writing the rest fails, but its answer is there
		// to read, and it is what the browser should get.
		if !pending(conn) {
			hc.CloseConn(cc)
			return nil, reused, err
		}
		early = true
	}

	// The request is out (its body too, or the app answered before it
	// took it all): from now on, nothing else reads the browser's
	// connection until the answer is through.
	w := watchBrowser(browser, func() { _ = conn.Close() })
	br := hc.AcquireReader(conn)
	resp.Header.DisableNormalizing() // the app's header names go on as it spelt them
	// An answer without Content-Type goes on without one (the browser
	// sniffs it, as on the console's listener), not as text/plain.
	resp.Header.SetNoDefaultContentType(true)
	resp.StreamBody = true
	if req.Header.IsHead() {
		resp.SkipBody = true
	}
	if err = resp.ReadLimitBody(br, 0); err != nil {
		gone := w.stop()
		hc.ReleaseReader(br)
		hc.CloseConn(cc)
		if gone {
			err = errBrowserGone
		}
		return nil, reused, err
	}
	// A body that ends when the connection does (neither a length nor
	// chunks) leaves nothing to reuse. fasthttp gives the same length (-2)
	// to an answer that has no body at all by its status (204, 304) or
	// its request (HEAD): that one ends with its head. (A 101 has
	// switched the connection to another protocol; other 1xx answers
	// were read past.)
	status := resp.StatusCode()
	bodiless := status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified || resp.SkipBody
	keep := !early && !resp.ConnectionClose() && (resp.Header.ContentLength() != -2 || bodiless)
	finish := func(whole bool) {
		gone := w.stop()
		// Bytes after the answer's end are an answer to no request.
		if whole && keep && !gone && br.Buffered() == 0 {
			hc.ReleaseReader(br)
			hc.ReleaseConn(cc)
			return
		}
		hc.ReleaseReader(br)
		hc.CloseConn(cc)
	}
	if resp.BodyStream() == nil {
		finish(true)
		return nil, reused, nil
	}
	return &appBody{Reader: resp.BodyStream(), resp: resp, finish: finish}, reused, nil
}

// appBody reads an answer's body from the app's connection; Close gives the
// connection back to the pool if the body was read to its end, and closes
// it otherwise.
type appBody struct {
	io.Reader
	resp   *fasthttp.Response
	finish func(whole bool)
	whole  bool
	closed bool
}

func (b *appBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF {
		b.whole = true
	}
	return n, err
}

func (b *appBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.resp.CloseBodyStream()
	b.finish(b.whole)
	return err
}

// browserWatch watches a browser's connection while the app works on its
// request, once browserWatchAfter has passed.
type browserWatch struct {
	c     net.Conn
	gone  func()
	timer *time.Timer

	mu      sync.Mutex
	stopped bool
	done    chan struct{} // closed when the watch ends; nil if it never began
	wentOff atomic.Bool
}

// watchBrowser calls gone if the browser's connection c closes or fails
// while the watch lasts, from browserWatchAfter on; stop ends the watch.
func watchBrowser(c net.Conn, gone func()) *browserWatch {
	if !canWatch(c) {
		return nil
	}
	w := &browserWatch{c: c, gone: gone}
	w.timer = time.AfterFunc(browserWatchAfter, w.watch)
	return w
}

func (w *browserWatch) watch() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	// The request's own read deadline (--read-timeout, from when it
	// came) would end the watch early; nothing else reads the connection
	// until stop. Cleared before done is set, so stop's deadline comes
	// after this one.
	_ = w.c.SetReadDeadline(time.Time{})
	w.done = make(chan struct{})
	w.mu.Unlock()
	defer close(w.done)
	if waitPeerGone(w.c) {
		w.wentOff.Store(true)
		w.gone()
	}
}

// stop ends the watch and reports whether the browser went away (and gone
// ran). The watch is over when it returns: the browser's connection is
// free to read again, with no read deadline (fasthttp sets its own before
// it reads the next request).
func (w *browserWatch) stop() bool {
	if w == nil {
		return false
	}
	w.timer.Stop()
	w.mu.Lock()
	w.stopped = true
	done := w.done
	w.mu.Unlock()
	if done != nil {
		// A deadline in the past wakes the watch's wait.
		_ = w.c.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = w.c.SetReadDeadline(time.Time{})
	}
	return w.wentOff.Load()
}
