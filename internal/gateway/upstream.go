package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// upstreamTransport carries the gateway's GET and HEAD requests to the apps.
//
// Why not net/http's Transport alone: it hands every request to a writer
// and a reader goroutine of the connection and the response back, and on a
// loaded host those hand-offs (goroutine wake-ups across threads) are a
// good part of a proxied GET's cost. This transport writes the request and
// reads the response in the calling goroutine, over a pooled keep-alive
// connection, with net/http's own wire code (Request.Write, ReadResponse).
// On two cores the gateway carries 4–10 % more GETs with it, at about
// 0.1 ms less p50 (BenchmarkGatewayVsDirect, docs/benchmarks.md).
//
// The rest goes to fallback: a request with a body (net/http writes the body
// while it reads the answer, so an app that answers early is heard) and an
// upgrade (a WebSocket needs the connection, not a pool). Page loads,
// assets and API reads, the bulk of an app UI's requests, are GETs.
type upstreamTransport struct {
	fallback    http.RoundTripper
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	now         func() time.Time
	maxIdle     int           // idle connections kept per app address
	idleTimeout time.Duration // an idle connection older than this is closed

	mu       sync.Mutex
	idle     map[string][]*upConn // by host:port, most recently used last
	sweeping bool
}

type upConn struct {
	net.Conn
	addr      string
	capped    capReader // what br reads from
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

// maxAnswerHead bounds the head of an app's answer (status line and
// headers, 1xx answers included), as net/http's server bounds a request's:
// an app that sends headers without end must not fill the gateway's memory.
const maxAnswerHead = 1 << 20

// max1xx is how many 1xx answers may come before the answer, as in
// net/http's Transport.
const max1xx = 5

var errAnswerHeadTooLarge = fmt.Errorf("the app's answer has more than %d bytes of headers", maxAnswerHead)

// capReader reads at most left bytes while left >= 0; -1 is no limit.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, errAnswerHeadTooLarge
	}
	if c.left > 0 && int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	if c.left > 0 {
		c.left -= int64(n)
	}
	return n, err
}

func newUpstreamTransport(fallback http.RoundTripper, dial func(context.Context, string, string) (net.Conn, error), now func() time.Time) *upstreamTransport {
	return &upstreamTransport{fallback: fallback, dial: dial, now: now, maxIdle: 256, idleTimeout: 90 * time.Second,
		idle: map[string][]*upConn{}}
}

// fast reports whether req can go the short way.
func fast(req *http.Request) bool {
	return (req.Method == http.MethodGet || req.Method == http.MethodHead) &&
		(req.Body == nil || req.Body == http.NoBody) &&
		req.URL.Scheme == "http" && req.URL.Host != "" &&
		req.Header.Get("Upgrade") == "" && !req.Close
}

func (t *upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !fast(req) {
		return t.fallback.RoundTrip(req)
	}
	for attempt := 0; ; attempt++ {
		c, reused, err := t.get(req.Context(), req.URL.Host)
		if err != nil {
			return nil, err
		}
		resp, err := t.exchange(c, req)
		if err == nil {
			return resp, nil
		}
		_ = c.Close()
		// A kept-alive connection the app had already closed fails at once;
		// a GET or HEAD may be sent again, once, on a new connection.
		if !reused || attempt > 0 || req.Context().Err() != nil {
			return nil, err
		}
	}
}

// exchange writes req on c and reads the answer's head; the body reads
// from c, which goes back to the pool once the body was read to its end.
func (t *upstreamTransport) exchange(c *upConn, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	// A request whose client went away must not wait on the app: a past
	// deadline wakes the read or write (the connection is not reused then).
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, error) {
		stop()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, err
	}
	if err := req.Write(c.bw); err != nil {
		return fail(err)
	}
	if err := c.bw.Flush(); err != nil {
		return fail(err)
	}
	c.capped.left = maxAnswerHead
	for n1xx := 0; ; n1xx++ {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return fail(err)
		}
		// 1xx answers (103 Early Hints) come before the answer; the
		// reverse proxy forwards them through its client trace, under
		// the final answer's header policy (earlyWriter).
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				return fail(errors.New("the app switched protocols on a request that asked for no upgrade"))
			}
			if n1xx == max1xx {
				return fail(fmt.Errorf("the app sent more than %d 1xx answers", max1xx))
			}
			if tr := httptrace.ContextClientTrace(ctx); tr != nil && tr.Got1xxResponse != nil {
				if err := tr.Got1xxResponse(resp.StatusCode, map[string][]string(resp.Header)); err != nil {
					return fail(err)
				}
			}
			continue
		}
		c.capped.left = -1 // the body may be any length
		resp.Body = &upBody{ReadCloser: resp.Body, c: c, t: t, stop: stop,
			done: resp.Body == http.NoBody, keep: !resp.Close}
		return resp, nil
	}
}

// upBody gives the connection back to the pool when the body was read to
// its end and the app keeps the connection open; otherwise closes it.
type upBody struct {
	io.ReadCloser
	c      *upConn
	t      *upstreamTransport
	stop   func() bool
	done   bool
	keep   bool
	closed bool
}

func (b *upBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.done = true
	}
	return n, err
}

func (b *upBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if !b.done {
		// The body of an answer read from a connection is drained to its
		// end on Close: an answer the proxy gave up on (a browser gone, a
		// stream whose access ended) would wait on the app for as long as
		// it sends. The connection is closed instead, which ends that read.
		_ = b.c.Close()
	}
	err := b.ReadCloser.Close()
	// stop is false when the request's context ended and the deadline
	// was set: that connection is spoilt.
	if b.stop() && b.done && b.keep {
		b.t.put(b.c)
		return err
	}
	_ = b.c.Close()
	return err
}

// get takes the most recently used idle connection to addr that is still
// fit to use (connCheck), or dials one.
func (t *upstreamTransport) get(ctx context.Context, addr string) (*upConn, bool, error) {
	now := t.now()
	t.mu.Lock()
	for {
		list := t.idle[addr]
		if len(list) == 0 {
			break
		}
		c := list[len(list)-1]
		list[len(list)-1] = nil
		t.idle[addr] = list[:len(list)-1]
		if t.stale(c, now) {
			_ = c.Close()
			continue
		}
		t.mu.Unlock()
		if c.br.Buffered() == 0 && connCheck(c.Conn) == nil {
			return c, true, nil
		}
		_ = c.Close()
		t.mu.Lock()
	}
	t.mu.Unlock()
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, fmt.Errorf("dial the app at %s: %w", addr, err)
	}
	c := &upConn{Conn: nc, addr: addr, capped: capReader{r: nc, left: -1}, bw: bufio.NewWriterSize(nc, 4<<10)}
	c.br = bufio.NewReaderSize(&c.capped, 8<<10)
	return c, false, nil
}

// stale says whether idle connection c has been idle too long to use.
func (t *upstreamTransport) stale(c *upConn, now time.Time) bool {
	return now.Sub(c.idleSince) >= t.idleTimeout
}

func (t *upstreamTransport) put(c *upConn) {
	c.idleSince = t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.idle[c.addr]) >= t.maxIdle {
		_ = c.Close()
		return
	}
	t.idle[c.addr] = append(t.idle[c.addr], c)
	if !t.sweeping {
		t.sweeping = true
		time.AfterFunc(t.idleTimeout/2, t.sweep)
	}
}

// sweep closes connections idle for longer than idleTimeout, so a
// decommissioned instance's connections do not stay open; it runs while
// anything is idle.
func (t *upstreamTransport) sweep() {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for addr, list := range t.idle {
		keep := list[:0]
		for _, c := range list {
			if t.stale(c, now) {
				_ = c.Close()
			} else {
				keep = append(keep, c)
			}
		}
		clear(list[len(keep):])
		if len(keep) == 0 {
			delete(t.idle, addr)
		} else {
			t.idle[addr] = keep
		}
	}
	if len(t.idle) == 0 {
		t.sweeping = false
		return
	}
	time.AfterFunc(t.idleTimeout/2, t.sweep)
}

// CloseIdleConnections closes every idle connection, the fallback's too.
func (t *upstreamTransport) CloseIdleConnections() {
	t.mu.Lock()
	for _, list := range t.idle {
		for _, c := range list {
			_ = c.Close()
		}
	}
	clear(t.idle)
	t.mu.Unlock()
	if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}
