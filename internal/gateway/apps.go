package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// AppsServer serves the app origins (<instance-id>.<apps domain>) on a
// listener of their own, on fasthttp rather than net/http. net/http's
// server and transport spend more on a proxied request than the hop needs:
// on fasthttp the same gateway carries 1.1-1.5 times the requests
// (docs/benchmarks.md, "The apps listener"). Here the proxied requests, the
// bulk of an app's traffic, are read, sent on and answered in one
// goroutine with fasthttp's reused buffers.
//
// Only a request the gateway lets through to a running app is proxied
// here: it carries a valid app token for the instance of its host, comes
// from no page it must not answer to (foreign: no change, and nothing but
// a navigation, from another origin's page), is no WebSocket upgrade,
// HEAD or CONNECT, and is not for the gateway's own paths (/__gpuaas/). Its
// body streams to the app and the answer streams back. Everything else
// (the code's redemption, refusals, the pages that explain them,
// upgrades) goes to the same net/http gateway as on the
// console's listener, through fasthttp's adaptor, so each is decided in one
// place. The platform's credentials are taken out of a proxied request by
// the rules the net/http path follows (TestGateway* run on both).
//
// It needs a listener of its own because one connection from a load
// balancer carries requests for any host: on the console's listener, a
// console upload would end up in the adaptor, which buffers a body whole.
type AppsServer struct {
	g    *Gateway
	cfg  AppsServerConfig
	srv  *fasthttp.Server
	slow fasthttp.RequestHandler

	mu      sync.Mutex
	clients map[string]*fasthttp.HostClient // by app address

	proxied atomic.Int64 // requests proxied here (not by the slow path), for tests
}

// AppsServerConfig sets an AppsServer's timeouts. They bound each wait,
// not a whole request, as for a request proxied on the console's listener
// (deadline.go): an upload or an event stream through the gateway lives as
// long as it moves.
type AppsServerConfig struct {
	ReadTimeout  time.Duration // a request's head, and each wait for more of its body (0: none)
	WriteTimeout time.Duration // each wait for the browser to take more of an answer (0: none)
	IdleTimeout  time.Duration // between requests on a connection
}

// maxAppsHead bounds a request's head on the apps listener (and an app's
// answer's): fasthttp reads a head into one buffer of this size per
// connection.
const maxAppsHead = 32 << 10

// NewAppsServer builds the app origins' server; Serve runs it.
func (g *Gateway) NewAppsServer(c AppsServerConfig) *AppsServer {
	s := &AppsServer{g: g, cfg: c, clients: map[string]*fasthttp.HostClient{}}
	slow := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.page(w, http.StatusNotFound, "Not found", "This address serves app UIs only, at <instance-id>."+g.cfg.Domain+".", "")
	}))
	s.slow = fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The adaptor's request context is fasthttp's RequestCtx, which
		// fasthttp recycles once its handler returns; a hijacked
		// upgrade's proxy outlives that, so it gets a context of its own.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		slow.ServeHTTP(w, r.WithContext(ctx))
	}))
	s.srv = &fasthttp.Server{
		Handler:               s.handle,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		// A body up to this size is read before the handler runs; a
		// larger one streams to the app as it arrives.
		StreamRequestBody:            true,
		MaxRequestBodySize:           64 << 10,
		ReadBufferSize:               maxAppsHead,
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  c.ReadTimeout,
		WriteTimeout:                 c.WriteTimeout,
		IdleTimeout:                  c.IdleTimeout,
		CloseOnShutdown:              true,
		Logger:                       fastLogger{g},
	}
	return s
}

// Serve answers on ln until Shutdown.
func (s *AppsServer) Serve(ln net.Listener) error { return s.srv.Serve(lingerListener{ln}) }

// Shutdown stops accepting, lets requests in flight end until ctx does,
// and closes idle connections.
func (s *AppsServer) Shutdown(ctx context.Context) error { return s.srv.ShutdownWithContext(ctx) }

func (s *AppsServer) handle(ctx *fasthttp.RequestCtx) {
	// fasthttp does not recover a handler's panic (and the adaptor passes
	// one on); as net/http does, the request fails, its connection closes
	// and the server goes on.
	defer func() {
		if rec := recover(); rec != nil {
			s.g.cfg.Logger.Error("ui gateway (apps listener): panic serving a request", "panic", fmt.Sprint(rec), "host", string(ctx.Host()))
			ctx.Response.Reset()
			ctx.SetStatusCode(http.StatusInternalServerError)
			ctx.SetConnectionClose()
		}
	}()
	if s.proxy(ctx) {
		return
	}
	if ctx.RequestBodyStream() != nil {
		// The gateway answers this request itself (a refusal or its own
		// path) and reads no body, so none is read into memory for it
		// (the adaptor would, warning that it does so): it goes to the
		// slow path with none. What is left of a body on the connection
		// ends the connection; a request without one (a GET, or
		// Content-Length: 0, which still comes with a stream) keeps it.
		if hasBody(&ctx.Request.Header) {
			lingerClose(ctx)
		}
		ctx.Request.SetBodyRaw(nil)
		ctx.Request.Header.SetContentLength(0)
	}
	s.slow(ctx)
}

// hasBody says whether a request has a body: a Content-Length above 0, or
// chunks. Without either it has none (RFC 9112, 6.3), though fasthttp
// gives its length as -2 ("identity") then, as for a bodyless GET.
func hasBody(h *fasthttp.RequestHeader) bool {
	n := h.ContentLength()
	return n > 0 || n == -1
}

// How long, and how much more of an unread request body, a lingering
// close waits for after the answer.
const (
	lingerFor = 500 * time.Millisecond
	lingerMax = 64 << 20
)

// lingerClose has the browser's connection closed after the answer, and
// gently: for a request whose body was not read to its end. Closed at once
// with the browser's bytes unread, a connection ends in a reset, and a
// browser still sending its body may lose the answer with it. net/http's
// server lingers; fasthttp closes at once, so the apps listener's
// connections (lingerConn) do it.
func lingerClose(ctx *fasthttp.RequestCtx) {
	ctx.SetConnectionClose()
	if lc, ok := ctx.Conn().(*lingerConn); ok {
		lc.linger.Store(true)
	}
}

// lingerConn is a browser's connection to the apps listener.
type lingerConn struct {
	*net.TCPConn // its methods (SyscallConn for the watch, CloseWrite) go with it
	linger       atomic.Bool
}

// Close closes the connection; after lingerClose, first the gateway's side
// ends, and what more the browser sends is read and dropped until it stops,
// for at most lingerFor, lingerMax bytes. That happens in the background:
// fasthttp's goroutine goes on.
func (c *lingerConn) Close() error {
	if !c.linger.Load() {
		return c.TCPConn.Close()
	}
	go func() {
		_ = c.CloseWrite()
		_ = c.SetReadDeadline(deadlineIn(lingerFor))
		_, _ = io.Copy(io.Discard, io.LimitReader(c.TCPConn, lingerMax))
		_ = c.TCPConn.Close()
	}()
	return nil
}

// lingerListener hands out lingerConns.
type lingerListener struct{ net.Listener }

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		return &lingerConn{TCPConn: tc}, nil
	}
	return c, err
}

// proxy sends ctx's request to its app and its answer back, and reports
// whether it did; it does nothing to a request it leaves to the slow path.
func (s *AppsServer) proxy(ctx *fasthttp.RequestCtx) bool {
	h := &ctx.Request.Header
	uri := h.RequestURI()
	if len(h.Peek("Upgrade")) > 0 || h.IsHead() || h.IsConnect() ||
		!bytes.HasPrefix(uri, []byte("/")) || gatewayPath(uri) {
		return false
	}
	t, ok := s.g.matchHost(string(h.Host()))
	if !ok || fastForeign(h, t.origin) {
		// A request refused goes to the slow path, which checks its
		// token first, and refuses it by the same decision (foreign).
		return false
	}
	// Not ctx: fasthttp recycles it, and nothing here is cancelled early
	// (its Done is the server's shutdown). A token the re-check refuses
	// goes to the slow path, which finds it refused (authorize keeps that).
	claims, fresh, err := s.g.authorize(context.Background(), string(h.Cookie(s.g.cookieName(t))), t)
	if err != nil {
		return false
	}
	up, err := s.g.upstream(context.Background(), t.instanceID)
	if !admitted(up, claims, err) {
		return false
	}

	req := fasthttp.AcquireRequest()
	s.g.outboundHeader(ctx.RemoteIP(), h, &req.Header)
	req.SetRequestURIBytes(uri)
	var upload *moving
	switch n := h.ContentLength(); {
	case !hasBody(h):
	case ctx.RequestBodyStream() != nil:
		upload = &moving{Reader: ctx.RequestBodyStream(), conn: ctx.Conn(), read: true, d: s.cfg.ReadTimeout, left: n}
		req.SetBodyStream(upload, n)
	default:
		req.SetBodyRaw(ctx.Request.Body())
	}
	resp := fasthttp.AcquireResponse()
	body, err := roundTrip(s.client(up.Addr), req, resp, ctx.Conn())
	if err != nil {
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		ctx.Response.Reset()
		if upload != nil && !upload.eof {
			lingerClose(ctx) // the page below should reach the browser
		} else {
			ctx.SetConnectionClose()
		}
		if errors.Is(err, errBrowserGone) {
			// Nobody may read it, but a browser that only half-closed
			// does: it gets what the console's listener answers then
			// (the proxy's failure), not an empty success.
			s.g.cfg.Logger.Info("ui gateway: the browser went away before the app answered; the app's connection is closed", "host", string(h.Host()))
			s.g.fastPage(ctx, http.StatusBadGateway, "The app did not answer", "The browser went away before the app answered.")
			return true
		}
		if upload != nil && upload.err != nil {
			// The browser's side failed: it stopped sending the body.
			s.g.cfg.Logger.Info("ui gateway: a request body stopped coming", "err", upload.err, "host", string(h.Host()))
			s.g.fastPage(ctx, http.StatusRequestTimeout, "The upload stopped", "The rest of the request did not arrive in time. Try again.")
			return true
		}
		s.g.cfg.Logger.Warn("ui gateway: upstream failed", "err", err, "host", string(h.Host()))
		s.g.fastPage(ctx, http.StatusBadGateway, "The app did not answer",
			"The instance is running but its UI did not answer ("+err.Error()+"). Try again in a moment, or look at its logs in the console.")
		return true
	}
	fasthttp.ReleaseRequest(req)
	s.proxied.Add(1)
	if upload != nil && !upload.eof {
		lingerClose(ctx) // the app answered before it took the whole body
	}

	out := &ctx.Response.Header
	out.SetNoDefaultContentType(true)
	out.SetStatusCode(resp.StatusCode())
	s.g.inboundHeader(&resp.Header, out)
	out.Add("Content-Security-Policy", "frame-ancestors "+s.g.consoleOrigin())
	if fresh != nil { // the renewed app token (the app's own lines for it are dropped above)
		out.Add("Set-Cookie", fresh.String())
	}
	if body != nil {
		src := &releasing{moving: moving{conn: ctx.Conn(), d: s.cfg.WriteTimeout}, body: body, resp: resp,
			held: heldReader{r: body, access: s.g.hold(claims)}}
		src.Reader = &src.held
		n := resp.Header.ContentLength()
		if n < 0 && !h.IsHTTP11() {
			s.untilClose(ctx, src)
			return true
		}
		if n < 0 {
			n = -1 // chunked to the browser, whatever the app's framing
			// The head goes out now, not with the first piece: an event
			// stream's head is its opening (an EventSource is open then),
			// and the app may take its time before the first event.
			// net/http's reverse proxy does the same on the console's
			// listener.
			ctx.Response.ImmediateHeaderFlush = true
		}
		ctx.SetBodyStream(src, n)
		return true
	}
	fasthttp.ReleaseResponse(resp)
	return true
}

// fastForeign is foreign on the apps listener's fast path: whether a
// request is refused. The headers are read in place (a value converted for
// the call, which keeps none, is copied to the stack, not allocated, up to
// 32 bytes: Sec-Fetch-* values are shorter).
func fastForeign(h *fasthttp.RequestHeader, own string) bool {
	return foreign(string(h.Method()), string(h.Peek("Sec-Fetch-Site")), string(h.Peek("Sec-Fetch-Mode")),
		string(h.Peek("Sec-Fetch-Dest")), string(h.Peek("Origin")), own) != ""
}

// gatewayPath says whether a request URI is for the gateway's own paths
// (/__gpuaas/…, the code's redemption) as the console's listener reads
// it: net/http decides on the path decoded, so /%5F_gpuaas/open is the
// redemption there, and must not go to the app here.
func gatewayPath(uri []byte) bool {
	path, _, _ := bytes.Cut(uri, []byte("?"))
	if bytes.HasPrefix(path, []byte("/__gpuaas/")) {
		return true
	}
	if bytes.IndexByte(path, '%') < 0 {
		return false
	}
	p, err := url.PathUnescape(string(path))
	return err == nil && strings.HasPrefix(p, "/__gpuaas/")
}

// untilClose sends an answer of unknown length to a browser that is not
// HTTP/1.1: it cannot read chunks, and fasthttp frames every body stream
// of unknown length in chunks (a stream's length -2 too). As net/http's
// server does, the body goes as it comes, and the connection's close ends
// it: the connection is taken over once the handler returns, and the
// answer written on it here.
func (s *AppsServer) untilClose(ctx *fasthttp.RequestCtx, body *releasing) {
	out := &ctx.Response.Header
	out.SetConnectionClose()
	head := out.AppendBytes(nil) // neither Content-Length nor Transfer-Encoding
	d := s.cfg.WriteTimeout
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		defer body.Close()
		if d > 0 {
			_ = c.SetWriteDeadline(deadlineIn(d)) // the body's reads move it on
		}
		if _, err := c.Write(head); err != nil {
			return
		}
		buf := bufferPool{}.Get()
		defer bufferPool{}.Put(buf)
		_, _ = io.CopyBuffer(struct{ io.Writer }{c}, body, buf)
	})
}

// moving moves the browser connection's read (or write) deadline d on
// each time a body stream between it and the app yields data: the timeout
// bounds a wait, not the whole body.
type moving struct {
	io.Reader
	conn net.Conn
	read bool
	d    time.Duration
	// left is what a request body of declared length has yet to yield:
	// fasthttp's stream ends a body shorter than its Content-Length (the
	// browser stopped sending and closed its side) with a plain io.EOF,
	// which would pass the short body on as whole, and the app's failure
	// to take it as the app's.
	left int
	err  error // the stream's own failure (not io.EOF)
	eof  bool  // the stream was read to its end
}

func (m *moving) Read(p []byte) (int, error) {
	n, err := m.Reader.Read(p)
	m.left -= n
	if err == io.EOF && m.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err == io.EOF {
		m.eof = true
	} else if err != nil {
		m.err = err
	}
	if n > 0 && m.d > 0 {
		if m.read {
			_ = m.conn.SetReadDeadline(deadlineIn(m.d))
		} else {
			_ = m.conn.SetWriteDeadline(deadlineIn(m.d))
		}
	}
	return n, err
}

// releasing gives the app's connection and answer back once the answer's
// body has been sent on (fasthttp closes a body stream when done with it).
// The body passes through held: a piece that arrives once the access has
// ended is not passed on (access.go).
type releasing struct {
	moving
	body *appBody
	resp *fasthttp.Response
	held heldReader
}

func (r *releasing) Close() error {
	err := r.body.Close()
	fasthttp.ReleaseResponse(r.resp)
	return err
}

// client is the keep-alive pool to one app address.
func (s *AppsServer) client(addr string) *fasthttp.HostClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[addr]
	if !ok {
		if len(s.clients) > 10000 {
			clear(s.clients) // addresses of instances long gone; their idle connections close by themselves
		}
		d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
		c = &fasthttp.HostClient{
			Addr: addr,
			Dial: func(a string) (net.Conn, error) { return d.Dial("tcp", a) },
			// roundTrip uses the pool, not Do, so Do's settings (the
			// User-Agent, path and header-name normalising, streaming)
			// are roundTrip's to apply.
			MaxConns:            4096,
			MaxConnWaitTimeout:  5 * time.Second,
			MaxIdleConnDuration: 90 * time.Second,
			ReadBufferSize:      maxAppsHead,
		}
		s.clients[addr] = c
	}
	return c
}

// hopByHop are the headers that belong to one connection, not to the
// request or answer (RFC 9110, 7.6.1), as net/http's ReverseProxy drops
// them; the headers a Connection header names go as well.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// connectionHeader is every Connection header's value, joined, whatever
// case the sender spelled its name in (fasthttp's Peek matches the name
// exactly where it keeps names as they came).
func connectionHeader(all iter.Seq2[[]byte, []byte]) []byte {
	var v []byte
	for k, val := range all {
		if bytes.EqualFold(k, []byte("Connection")) {
			v = append(append(v, ','), val...)
		}
	}
	return v
}

func dropHeader(name []byte, connection []byte) bool {
	for _, h := range hopByHop {
		if bytes.EqualFold(name, []byte(h)) {
			return true
		}
	}
	for tok := range bytes.SplitSeq(connection, []byte(",")) {
		if tok = bytes.TrimSpace(tok); len(tok) > 0 && bytes.EqualFold(name, tok) {
			return true
		}
	}
	return false
}

// outboundHeader writes into out the head of a request to send on to the
// app: what rewrite does on the net/http path.
func (g *Gateway) outboundHeader(client net.IP, in, out *fasthttp.RequestHeader) {
	out.SetNoDefaultContentType(true)
	out.SetMethodBytes(in.Method())
	out.SetHostBytes(in.Host())
	connection := connectionHeader(in.All())
	var cookies []byte
	for k, v := range in.Cookies() {
		if g.ours(string(k)) {
			continue
		}
		if len(cookies) > 0 {
			cookies = append(cookies, "; "...)
		}
		cookies = append(append(append(cookies, k...), '='), v...)
	}
	for k, v := range in.All() {
		switch {
		case dropHeader(k, connection):
		case bytes.EqualFold(k, []byte("Host")), bytes.EqualFold(k, []byte("Content-Length")),
			// The apps listener answered the Expect itself; the body follows anyway.
			bytes.EqualFold(k, []byte("Expect")),
			bytes.EqualFold(k, []byte("Cookie")),
			// As rewrite drops them (no path mode here to set a prefix).
			forwardingHeader(string(k)):
		case bytes.EqualFold(k, []byte("Authorization")) && g.isPlatformAuthorization(context.Background(), string(v)):
		default:
			out.AddBytesKV(k, v)
		}
	}
	if len(cookies) > 0 {
		out.SetBytesV("Cookie", cookies)
	}
	out.Set("X-Forwarded-For", client.String())
	out.SetBytesV("X-Forwarded-Host", in.Host())
	out.Set("X-Forwarded-Proto", g.scheme())
}

// inboundHeader copies an app's answer's head into out: what
// modifyResponse does on the net/http path.
func (g *Gateway) inboundHeader(in *fasthttp.ResponseHeader, out *fasthttp.ResponseHeader) {
	connection := connectionHeader(in.All())
	for k, v := range in.All() {
		switch {
		case dropHeader(k, connection), bytes.EqualFold(k, []byte("Content-Length")),
			bytes.EqualFold(k, []byte(clearSiteData)):
		case bytes.EqualFold(k, []byte("Set-Cookie")):
			if !g.oursSetCookie(string(v)) {
				out.AddBytesKV(k, v)
			}
		default:
			out.AddBytesKV(k, v)
		}
	}
}

// isPlatformAuthorization says whether an Authorization header carries a
// platform token, which never reaches an app.
func (g *Gateway) isPlatformAuthorization(ctx context.Context, h string) bool {
	if g.cfg.IsPlatformToken == nil {
		return false
	}
	// The token is what follows the scheme, blanks trimmed: an app that
	// trims them would have a platform token from "Bearer  <token>".
	h = strings.Trim(h, " \t")
	i := strings.IndexAny(h, " \t")
	return i > 0 && strings.EqualFold(h[:i], "Bearer") && g.cfg.IsPlatformToken(ctx, strings.Trim(h[i:], " \t"))
}

// fastPage is page on the apps listener.
func (g *Gateway) fastPage(ctx *fasthttp.RequestCtx, status int, title, msg string) {
	ctx.Response.Header.Set("Content-Type", "text/html; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.Response.Header.Set("Content-Security-Policy", "frame-ancestors "+g.consoleOrigin())
	ctx.SetStatusCode(status)
	_ = pageTmpl.Execute(ctx, map[string]string{"Title": title, "Message": msg})
}

// fastLogger sends fasthttp's own complaints (errors accepting connections,
// connection limits reached) to the gateway's log.
type fastLogger struct{ g *Gateway }

func (l fastLogger) Printf(format string, args ...any) {
	l.g.cfg.Logger.Warn("ui gateway (apps listener): " + fmt.Sprintf(format, args...))
}
