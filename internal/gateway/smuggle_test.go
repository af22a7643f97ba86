package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// strictApp is an app that reads its requests by hand and records, for
// each, its path and whether its framing was ambiguous: Content-Length and
// Transfer-Encoding together, a Transfer-Encoding other than chunked, or
// two Content-Lengths. It answers each with its path. An app server is
// free to read such a request differently from the gateway, so one the
// gateway forwards is a way to smuggle a request past it.
type strictApp struct {
	mu        sync.Mutex
	paths     []string
	ambiguous []string
}

func (a *strictApp) serve(c net.Conn, br *bufio.Reader) {
	tp := textproto.NewReader(br)
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		f := strings.Fields(line)
		h, err := tp.ReadMIMEHeader()
		if err != nil || len(f) != 3 {
			return
		}
		te, cl := h.Values("Transfer-Encoding"), h.Values("Content-Length")
		a.mu.Lock()
		a.paths = append(a.paths, f[1])
		if (len(te) > 0 && len(cl) > 0) || len(cl) > 1 || len(te) > 1 || (len(te) == 1 && !strings.EqualFold(te[0], "chunked")) {
			a.ambiguous = append(a.ambiguous, f[1]+" "+fmt.Sprint(h))
		}
		a.mu.Unlock()
		var body io.Reader = strings.NewReader("")
		switch {
		case len(te) > 0:
			body = httputil.NewChunkedReader(br)
		case len(cl) > 0:
			n, err := strconv.ParseInt(cl[0], 10, 64)
			if err != nil {
				return
			}
			body = io.LimitReader(br, n)
		}
		if _, err := io.Copy(io.Discard, body); err != nil {
			return
		}
		if len(te) > 0 { // the chunked body's trailer section
			if _, err := tp.ReadMIMEHeader(); err != nil {
				return
			}
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(f[1]), f[1])
	}
}

// drain ends what c sends and reads every answer to it, for at most wait,
// then closes it.
func drain(c net.Conn, wait time.Duration) {
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, _ = io.ReadAll(c)
	c.Close()
}

func (a *strictApp) seen() (paths, ambiguous []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.paths...), append([]string(nil), a.ambiguous...)
}

// A request whose length two parsers could read differently (the
// classic request-smuggling shapes: Content-Length beside
// Transfer-Encoding, an obfuscated Transfer-Encoding, two
// Content-Lengths) never reaches the app in that shape, and never makes
// the gateway forward a request it did not check: each one the app gets
// has one framing, the gateway's own. Connections to the app are pooled
// for everyone who opens the instance, so a request smuggled onto one
// would be answered to, or prefixed to, another person's. After each
// attempt, another browser's GET still gets its own answer.
func TestGatewayForwardsOneFramingOnly(t *testing.T) { onBothListeners(t, testOneFraming) }

func testOneFraming(t *testing.T, apps bool) {
	app := &strictApp{}
	addr, _ := rawApp(t, app.serve)
	r := newRigOn(t, apps, addr)
	cookie := r.open(t)
	host := inst + ".apps.test:8080"
	// A request smuggled in the body: a second request, without the app
	// cookie, that only a parser reading the first body by the other
	// header sees. The gateway refuses it where it reads it as a request
	// of its own (no cookie); the app must never get it.
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	chunkedThenSmuggled := "0\r\n\r\n" + smuggled
	attempts := map[string]string{
		"content-length and chunked": "Content-Length: " + strconv.Itoa(len(chunkedThenSmuggled)) + "\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedThenSmuggled,
		"chunked and content-length": "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n" + chunkedThenSmuggled,
		"obfuscated chunked":         "Content-Length: " + strconv.Itoa(len(chunkedThenSmuggled)) + "\r\nTransfer-Encoding: xchunked\r\n\r\n" + chunkedThenSmuggled,
		"chunked, identity":          "Content-Length: " + strconv.Itoa(len(chunkedThenSmuggled)) + "\r\nTransfer-Encoding: chunked, identity\r\n\r\n" + chunkedThenSmuggled,
		"two transfer-encodings":     "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\nContent-Length: " + strconv.Itoa(len(chunkedThenSmuggled)) + "\r\n\r\n" + chunkedThenSmuggled,
		"two content-lengths":        "Content-Length: 0\r\nContent-Length: " + strconv.Itoa(len(smuggled)) + "\r\n\r\n" + smuggled,
		"space before the colon":     "Content-Length : " + strconv.Itoa(len(smuggled)) + "\r\n\r\n" + smuggled,
	}
	// The control: sent straight to the app, a body framed both ways
	// carries the request hidden in it to the app, which sees both
	// framings: what the gateway must stop.
	direct := &strictApp{}
	daddr, _ := rawApp(t, direct.serve)
	dc, err := net.Dial("tcp", daddr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(dc, "POST /attack HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", host, smuggled)
	drain(dc, 5*time.Second)
	if p, amb := direct.seen(); len(amb) != 1 || strings.Join(p, " ") != "/attack /smuggled" {
		t.Fatalf("the control, straight to the app: paths %v, framed two ways %v", p, amb)
	}
	for name, rest := range attempts {
		c := r.dial(t)
		fmt.Fprintf(c, "POST /attack HTTP/1.1\r\nHost: %s\r\nCookie: __Host-gpuaas_app=%s\r\n%s", host, cookie.Value, rest)
		// Whatever the gateway answers (the app's answer, or a refusal),
		// read it all.
		drain(c, time.Second)
		if resp, body := r.get(t, "/victim", cookie, nil); resp.StatusCode != http.StatusOK || body != "/victim" {
			t.Errorf("%s: another browser's GET /victim then got %d %q", name, resp.StatusCode, body)
		}
	}
	paths, ambiguous := app.seen()
	for _, p := range paths {
		if p == "/smuggled" {
			t.Errorf("the app got a request smuggled in a body: %v", paths)
			break
		}
	}
	if len(ambiguous) > 0 {
		t.Errorf("the app got requests framed two ways:\n%s", strings.Join(ambiguous, "\n"))
	}
}
